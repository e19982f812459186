package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrBadTiming is wrapped by every error about a schedule's timing.
var ErrBadTiming = errors.New("schedule: invalid timing")

// parser reads five fields with an optional leading seconds field, and the
// descriptors (@daily, @hourly, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Timing is when a schedule's ticks fall. It is safe for concurrent use.
type Timing struct {
	cron cron.Schedule
	loc  *time.Location
	// fixedHours is set when the hour field is not "*": such a schedule
	// fires a wall time that a fall-back repeats once, not twice.
	fixedHours bool
	every      time.Duration
	anchor     time.Time
}

// MinEvery is the shortest interval an every-schedule may have.
const MinEvery = time.Second

// FieldError is a timing problem with the field it is about ("cron",
// "every", "tz").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func bad(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf("%w: "+format, append([]any{ErrBadTiming}, args...)...)}
}

// NewCron returns the timing of the cron expression expr in the time zone
// tz ("" = UTC). A zone inside the expression (CRON_TZ=, TZ=) and @every
// are refused: the zone is its own field, and an interval is Every.
func NewCron(expr, tz string) (*Timing, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, bad("cron", "must not be empty")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, bad("cron", "name the time zone with tz, not inside the expression")
	}
	if strings.HasPrefix(expr, "@every") {
		return nil, bad("cron", "use every for a fixed interval")
	}
	loc, err := Zone(tz)
	if err != nil {
		return nil, err
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, bad("cron", "%v", err)
	}
	tm := &Timing{cron: s, loc: loc}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		tm.fixedHours = spec.Hour&starBit == 0
	}
	return tm, nil
}

// Zone loads the named time zone ("" = UTC).
func Zone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, bad("tz", "unknown time zone %q", tz)
	}
	return loc, nil
}

// NewEvery returns the timing of ticks every d, at anchor + k·d (anchor
// truncated to the second) for k ≥ 1.
func NewEvery(d time.Duration, anchor time.Time) (*Timing, error) {
	if d < MinEvery {
		return nil, bad("every", "%v is shorter than the minimum %v", d, MinEvery)
	}
	return &Timing{every: d, anchor: anchor.Truncate(time.Second)}, nil
}

// starBit marks a cron field written "*" (robfig/cron's SpecSchedule).
const starBit = 1 << 63

// repeatedWall reports whether t's wall time already occurred earlier the
// same day (the second pass of a fall-back hour, 30 or 60 minutes back).
func (t *Timing) repeatedWall(at time.Time) bool {
	wall := at.Format("2006-01-02 15:04:05")
	for _, back := range []time.Duration{30 * time.Minute, time.Hour} {
		if at.Add(-back).In(t.loc).Format("2006-01-02 15:04:05") == wall {
			return true
		}
	}
	return false
}

// Next returns the first tick strictly after t (UTC). A cron tick is
// computed in the timing's zone: a wall time that a DST change skips does
// not occur that day; a wall time that a fall-back repeats fires once when
// the hour field is fixed, and at both instants when it is "*" (hourly
// schedules keep firing every real hour). docs/schedules.md.
func (t *Timing) Next(after time.Time) time.Time {
	if t.cron != nil {
		next := t.cron.Next(after.In(t.loc))
		for i := 0; i < 2 && t.fixedHours && t.repeatedWall(next); i++ {
			next = t.cron.Next(next)
		}
		return next.UTC()
	}
	if after.Before(t.anchor) {
		return t.anchor.Add(t.every).UTC()
	}
	k := after.Sub(t.anchor)/t.every + 1
	return t.anchor.Add(k * t.every).UTC()
}
