package budget

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
)

// The pacer lets one warning a key through per interval, and the next one
// through carries the count held back in between; keys are paced apart.
func TestWarnPacer(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newWarnPacer(clk, time.Minute)
	type got struct {
		suppressed int
		ok         bool
	}
	allow := func(key string) got {
		n, ok := p.allow(key)
		return got{n, ok}
	}

	require.Equal(t, got{0, true}, allow("job-1"), "the first warning")
	for range 3 {
		require.Equal(t, got{0, false}, allow("job-1"))
	}
	require.Equal(t, got{0, true}, allow("job-2"), "another key is paced apart")
	clk.Advance(59 * time.Second)
	require.Equal(t, got{0, false}, allow("job-1"), "within the minute")
	clk.Advance(time.Second)
	require.Equal(t, got{4, true}, allow("job-1"), "a minute after the last: the 4 held back")
	require.Equal(t, got{0, false}, allow("job-1"))
	clk.Advance(time.Hour)
	require.Equal(t, got{1, true}, allow("job-1"))
	require.Equal(t, got{0, true}, allow("job-2"), "none held back")

	p.forget("job-1")
	require.Equal(t, got{0, true}, allow("job-1"), "a forgotten key starts over")
}
