package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// ticks returns the n ticks after from.
func ticks(tm *Timing, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = tm.Next(t)
		out = append(out, t)
	}
	return out
}

func TestCronAcrossDST(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		from           time.Time
		want           []string // wall times in tz
	}{
		{
			// New York springs forward on 2026-03-08 at 02:00 → 03:00: 02:30
			// does not exist that day.
			name: "new york spring forward skips a missing wall time", expr: "30 2 * * *", tz: "America/New_York",
			from: time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC),
			want: []string{"2026-03-07 02:30 EST", "2026-03-09 02:30 EDT", "2026-03-10 02:30 EDT"},
		},
		{
			// New York falls back on 2026-11-01 at 02:00 → 01:00: 01:30 occurs
			// twice, the daily tick fires once.
			name: "new york fall back fires a repeated wall time once", expr: "30 1 * * *", tz: "America/New_York",
			from: time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC),
			want: []string{"2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"},
		},
		{
			name: "berlin spring forward, daily macro at midnight", expr: "@daily", tz: "Europe/Berlin",
			from: time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC),
			want: []string{"2026-03-29 00:00 CET", "2026-03-30 00:00 CEST"},
		},
		{
			// Berlin springs forward on 2026-03-29 at 02:00 → 03:00.
			name: "berlin hourly keeps real hours across spring forward", expr: "0 * * * *", tz: "Europe/Berlin",
			from: time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), // 01:30 CET
			want: []string{"2026-03-29 03:00 CEST", "2026-03-29 04:00 CEST"},
		},
		{
			// Berlin falls back on 2026-10-25 at 03:00 → 02:00.
			name: "berlin fall back fires a repeated wall time once", expr: "30 2 * * *", tz: "Europe/Berlin",
			from: time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC),
			want: []string{"2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"},
		},
		{
			name: "new york hourly fires every real hour across fall back", expr: "@hourly", tz: "America/New_York",
			from: time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC), // 00:30 EDT
			want: []string{"2026-11-01 01:00 EDT", "2026-11-01 01:00 EST", "2026-11-01 02:00 EST"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm, err := NewCron(tt.expr, tt.tz)
			require.NoError(t, err)
			loc := time.UTC
			if tt.tz != "" {
				loc = mustZone(t, tt.tz)
			}
			var got []string
			for _, tick := range ticks(tm, tt.from, len(tt.want)) {
				require.Equal(t, time.UTC, tick.Location())
				got = append(got, tick.In(loc).Format("2006-01-02 15:04 MST"))
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestCronSecondsAndHourly(t *testing.T) {
	tm, err := NewCron("*/15 * * * * *", "")
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC)
	require.Equal(t, []time.Time{from.Add(8 * time.Second), from.Add(23 * time.Second)}, ticks(tm, from, 2))

	tm, err = NewCron("@hourly", "Asia/Kolkata") // a half-hour offset
	require.NoError(t, err)
	from = time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC) // 05:40 IST
	require.Equal(t, time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC), tm.Next(from))
}

func TestEveryIsAnchored(t *testing.T) {
	anchor := time.Date(2026, 1, 1, 0, 0, 0, 400e6, time.UTC) // truncated to the second
	tm, err := NewEvery(2*time.Second, anchor)
	require.NoError(t, err)
	a := anchor.Truncate(time.Second)
	require.Equal(t, a.Add(2*time.Second), tm.Next(a.Add(-time.Hour)))
	require.Equal(t, a.Add(2*time.Second), tm.Next(a))
	require.Equal(t, a.Add(4*time.Second), tm.Next(a.Add(2*time.Second)))
	require.Equal(t, a.Add(4*time.Second), tm.Next(a.Add(3999*time.Millisecond)))
}

func TestTimingErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		every          time.Duration
		field          string
	}{
		{name: "empty cron", expr: " ", field: "cron"},
		{name: "bad cron", expr: "61 * * * *", field: "cron"},
		{name: "too many fields", expr: "* * * * * * *", field: "cron"},
		{name: "zone in expression", expr: "CRON_TZ=UTC 0 * * * *", field: "cron"},
		{name: "every macro", expr: "@every 5s", field: "cron"},
		{name: "unknown zone", expr: "@daily", tz: "Mars/Olympus", field: "tz"},
		{name: "short interval", every: time.Millisecond, field: "every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.every != 0 {
				_, err = NewEvery(tt.every, time.Time{})
			} else {
				_, err = NewCron(tt.expr, tt.tz)
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tt.field, fe.Field)
			require.ErrorIs(t, err, ErrBadTiming)
		})
	}
}
