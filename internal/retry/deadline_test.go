package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDeadline(t *testing.T) {
	var none Deadline
	require.True(t, none.IsZero())
	require.True(t, NewDeadline(t0, 0).IsZero(), "no agent_timeout")
	require.True(t, NewDeadline(time.Time{}, time.Minute).IsZero(), "no start")
	require.False(t, none.Passed(t0.Add(1000*time.Hour)))
	require.False(t, none.Refuses(t0, 1000*time.Hour))
	require.Equal(t, 30*time.Second, none.Bound(t0, 30*time.Second))

	d := NewDeadline(t0, 5*time.Minute)
	require.Equal(t, t0.Add(5*time.Minute), d.At())
	require.False(t, d.Passed(t0.Add(5*time.Minute-time.Nanosecond)))
	require.True(t, d.Passed(t0.Add(5*time.Minute)), "at the deadline the time is up")
	require.False(t, d.Refuses(t0.Add(4*time.Minute), 59*time.Second))
	require.True(t, d.Refuses(t0.Add(4*time.Minute), time.Minute), "a retry that would start with no time left")
	require.True(t, d.Refuses(t0.Add(6*time.Minute), -time.Second), "a negative delay is none")
	require.Equal(t, 30*time.Second, d.Bound(t0, 30*time.Second), "the step's own timeout is shorter")
	require.Equal(t, 20*time.Second, d.Bound(t0.Add(4*time.Minute+40*time.Second), 30*time.Second), "what is left is shorter")
	require.Equal(t, 5*time.Minute, d.Bound(t0, 0), "a step without a timeout")
	require.Equal(t, time.Millisecond, d.Bound(t0.Add(time.Hour), time.Minute), "never no timeout at all")
}
