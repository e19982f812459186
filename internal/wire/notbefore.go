package wire

import (
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// NotBeforeTime resolves a job's not_before: an RFC 3339 time as it is,
// a duration (humantime, "90s", "1h30m") from accepted.
func NotBeforeTime(s string, accepted time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := messages.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-11-27T02:00:00Z) nor a duration (10m)", s)
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("%q must not be negative", s)
	}
	return accepted.Add(d.D()), nil
}
