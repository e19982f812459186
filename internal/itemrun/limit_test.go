package itemrun

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/retry"
)

func TestLimitOutcome(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		f    *retry.Failure
		want limit.Outcome
	}{
		{"success", ctx, nil, limit.Success},
		{"429", ctx, &retry.Failure{Err: errors.New("http status 429 Too Many Requests")}, limit.Overload},
		{"503", ctx, &retry.Failure{Err: errors.New("http status 503 Service Unavailable")}, limit.Overload},
		{"timed out", ctx, &retry.Failure{Err: errors.New("killed"), TimedOut: true}, limit.Overload},
		{"retry after", ctx, &retry.Failure{Err: retry.After(time.Second, errors.New("busy"))}, limit.Overload},
		{"the item's fault", ctx, &retry.Failure{Err: errors.New("no such file")}, limit.Neutral},
		{"network", ctx, &retry.Failure{Err: errors.New("dial tcp: connection refused")}, limit.Neutral},
		{"cancelled", cancelled, nil, limit.Neutral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, limitOutcome(tc.ctx, tc.f))
		})
	}
}
