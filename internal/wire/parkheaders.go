package wire

// Headers of the park streams' message schedules.
const (
	// HeaderSchedule and HeaderScheduleTarget make a message a schedule
	// (nats-server 2.12+, a stream with AllowMsgSchedules): "@at <RFC
	// 3339 time>" publishes the message's body and headers on the target
	// subject, of the same stream, once, at that time, and removes the
	// schedule. Parked retries use them (docs/jetstream.md §16).
	HeaderSchedule       = "Nats-Schedule"
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleNext is set by the server on a message a schedule
	// fired: ScheduleNextPurge for a schedule that fires once, the next
	// time for one that repeats ("@every", cron).
	HeaderScheduleNext = "Nats-Schedule-Next"
	ScheduleNextPurge  = "purge"
	// HeaderParkReason marks a parked item's schedule with why it was
	// parked: ParkReasonBreaker for an item its job's circuit breaker
	// refused, which the pool's agents release at once when the breaker
	// closes (a retry's backoff is never cut short).
	HeaderParkReason  = "Fleet-Park-Reason"
	ParkReasonBreaker = "breaker"
)
