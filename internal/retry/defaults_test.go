package retry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The coordinator stores specs with defaults filled in and agents build
// policies from them: filling defaults must not switch jitter on.
func TestDefaultsDoNotEnableJitter(t *testing.T) {
	fixed := messages.MustDuration("300ms")
	cfg := &messages.RetryConfig{Backoff: &messages.Backoff{Kind: messages.BackoffFixed}, InitialDelay: &fixed}
	p, err := retry.NewPolicy(jobspec.RetryConfigWithDefaults(cfg))
	require.NoError(t, err)
	require.Equal(t, messages.JitterMode(""), p.JitterMode())
	for n := 1; n <= 3; n++ {
		require.Equal(t, 300*time.Millisecond, p.Delay(n, 0, retry.RandFunc(func() float64 { return 0 })))
	}

	cfg.Jitter = true
	p, err = retry.NewPolicy(jobspec.RetryConfigWithDefaults(cfg))
	require.NoError(t, err)
	require.Equal(t, messages.JitterProportional, p.JitterMode())
}
