package messages

import (
	"encoding/json"
	"fmt"
	"time"
)

// Schedule endpoints, relative to "<prefix>.api." (docs/schedules.md).
const (
	EndpointSchedulesAdd     = "schedules.add"
	EndpointSchedulesList    = "schedules.list"
	EndpointSchedulesGet     = "schedules.get"
	EndpointSchedulesPause   = "schedules.pause"
	EndpointSchedulesResume  = "schedules.resume"
	EndpointSchedulesTrigger = "schedules.trigger"
	EndpointSchedulesRemove  = "schedules.rm"
)

// SchedulesBucket holds the schedules, one key per schedule name.
func (n Names) SchedulesBucket() string { return n.prefix() + "_schedules" }

// Overlap policies: what a tick does while the schedule's previous run
// has not ended.
const (
	OverlapSkip  = "skip"  // the tick is skipped, with the reason recorded (the default)
	OverlapQueue = "queue" // the tick fires when the previous run ends; one tick waits at most
	OverlapAllow = "allow" // the tick fires
)

// DefaultCatchup is how late a missed tick may still fire when a schedule
// sets no catchup.
const DefaultCatchup = Duration(time.Hour)

// MaxScheduleNameLen bounds a schedule's name, so that a run's job id
// (name + "-" + tick) is a valid job id.
const MaxScheduleNameLen = 100

// Skip reasons.
const (
	SkipMissed  = "missed"   // no leader fired it within the catch-up window, or a later tick was due too
	SkipOverlap = "overlap"  // the previous run was still running (overlap skip)
	SkipQueued  = "replaced" // a newer tick took its place in the queue (overlap queue)
	SkipPaused  = "paused"   // the schedule was paused
)

// ScheduleSpec is what a schedule is made of (schedules.add).
type ScheduleSpec struct {
	Name string `json:"name"`
	// Cron is a cron expression (5 fields, or 6 with seconds first, or a
	// macro such as @daily); Every a fixed interval. Exactly one is set.
	Cron  string   `json:"cron,omitempty"`
	Every Duration `json:"every,omitempty"`
	// TZ is the time zone of Cron ("" = UTC), an IANA name.
	TZ string `json:"tz,omitempty"`
	// Overlap is skip (default), queue or allow.
	Overlap string `json:"overlap,omitempty"`
	// Catchup is how late a missed tick still fires. Defaults to 1h.
	Catchup *Duration `json:"catchup,omitempty"`
	// Job is the job spec each run submits; its id is set per run.
	Job json.RawMessage `json:"job"`
}

// ScheduleRun is one run a schedule started.
type ScheduleRun struct {
	Tick  time.Time `json:"tick"`
	JobID string    `json:"job_id"`
	// Decided is when the scheduler decided to fire it; Submitted whether
	// the job has been submitted (a new leader submits what is not).
	Decided   time.Time `json:"decided"`
	Submitted bool      `json:"submitted"`
	Late      bool      `json:"late,omitempty"`
	// Error is why the submission was refused (the job spec no longer
	// admitted); such a run has no job.
	Error  string `json:"error,omitempty"`
	Manual bool   `json:"manual,omitempty"`
	// State is the job's state when the schedule was read (not stored).
	State string `json:"state,omitempty"`
}

// ScheduleSkip is one or more consecutive ticks that did not fire.
type ScheduleSkip struct {
	// First and Last are the first and last tick skipped; Count how many.
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Count  int64     `json:"count"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// Schedule is a schedule's record (KV SchedulesBucket, key = name), as
// schedules.get returns it.
type Schedule struct {
	// V is the schema version (docs/contract.md §8).
	V Schema `json:"v"`
	ScheduleSpec
	CreatedAt time.Time `json:"created_at"`
	Paused    bool      `json:"paused,omitempty"`
	PausedAt  time.Time `json:"paused_at,omitzero"`
	// LastTick is the latest tick decided (fired, queued or skipped); ticks
	// after it are still to come.
	LastTick time.Time `json:"last_tick"`
	// Queued is a tick waiting for the previous run to end (overlap queue).
	Queued *time.Time `json:"queued,omitempty"`
	// Runs are the last runs, oldest first; Skips the last skips.
	Runs  []ScheduleRun  `json:"runs,omitempty"`
	Skips []ScheduleSkip `json:"skips,omitempty"`
	// Fired and Skipped count every run started by a tick and every tick
	// skipped, by reason.
	Fired   int64            `json:"fired"`
	Skipped map[string]int64 `json:"skipped,omitempty"`
	// NextRun is the next tick (computed when read, not stored).
	NextRun *time.Time `json:"next_run,omitempty"`
	// Writers are the ids of the last writes (internal/kvstate).
	Writers []string `json:"writers,omitempty"`
}

// ScheduleJobID is the job id of the run of schedule name at tick: the
// same tick always gives the same id, so a tick fired twice is one job.
func ScheduleJobID(name string, tick time.Time) string {
	return name + "-" + tick.UTC().Format("20060102t150405z")
}

// ValidScheduleName checks a schedule's name.
func ValidScheduleName(name string) error {
	if err := ValidToken(name); err != nil {
		return err
	}
	if len(name) > MaxScheduleNameLen {
		return fmt.Errorf("is %d bytes long, the limit is %d", len(name), MaxScheduleNameLen)
	}
	return nil
}

// ScheduleRequest names one schedule (get, pause, resume, trigger, rm).
type ScheduleRequest struct {
	Name string `json:"name"`
}

// ScheduleReply carries one schedule.
type ScheduleReply struct {
	Schedule *Schedule `json:"schedule"`
	// JobID is the job a trigger started.
	JobID string `json:"job_id,omitempty"`
}

// ScheduleListReply lists the schedules.
type ScheduleListReply struct {
	Schedules []Schedule `json:"schedules"`
}
