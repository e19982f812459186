package failure

import "time"

// ParkSpread is how far past the breaker's retry time a parked call may
// come back, as a fraction of its delay: the parked items of a long outage
// return spread over a quarter of the delay, not all at the instant the
// breaker half-opens (where all but half_open_requests of them would be
// parked again at once).
const ParkSpread = 0.25

// ParkDelay is the delay of a call parked by [retry.Breaker.Admit] that is due
// back in d (retryAt − now), spread by u in [0, 1): d·(1 + ParkSpread·u),
// at least 1 ms. Never earlier than d, so no call comes back to a breaker
// that is still open.
func ParkDelay(d time.Duration, u float64) time.Duration {
	d = max(d, time.Millisecond)
	u = min(max(u, 0), 1)
	return d + time.Duration(float64(d)*ParkSpread*u)
}
