package retry

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func newBreaker(t *testing.T, cfg *messages.CircuitBreakerConfig) *Breaker {
	t.Helper()
	b, err := NewBreaker(cfg)
	require.NoError(t, err)
	return b
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 3, Timeout: messages.MustDuration("10s")})
	var st BreakerState
	st = b.OnFailure(t0, st)
	st = b.OnFailure(t0, st)
	st = b.OnSuccess(t0, st) // resets the consecutive count
	require.True(t, st.Is(CircuitClosed))
	st = b.OnFailure(t0, st)
	st = b.OnFailure(t0, st)
	require.True(t, st.Is(CircuitClosed))
	require.Equal(t, 2, st.Failures)
	st = b.OnFailure(t0.Add(time.Second), st)
	require.True(t, st.Is(CircuitOpen))
	require.Equal(t, t0.Add(time.Second), st.OpenedAt)

	next, ok, retryAt := b.Admit(t0.Add(5*time.Second), st)
	require.False(t, ok)
	require.Equal(t, t0.Add(11*time.Second), retryAt)
	require.Equal(t, st, next)

	// A failure reported while open does not extend the open period.
	require.Equal(t, st, b.OnFailure(t0.Add(6*time.Second), st))
	require.Equal(t, st, b.OnSuccess(t0.Add(6*time.Second), st))
}

func TestBreakerHalfOpenAdmitsExactlyNProbes(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 1, SuccessThreshold: 10, HalfOpenRequests: n, Timeout: messages.MustDuration("30s")})
		st := b.OnFailure(t0, BreakerState{})
		now := t0.Add(30 * time.Second)
		admitted := 0
		for i := 0; i < n+5; i++ {
			var ok bool
			var retryAt time.Time
			st, ok, retryAt = b.Admit(now, st)
			if ok {
				admitted++
			} else {
				require.Equal(t, now.Add(7500*time.Millisecond), retryAt)
			}
		}
		require.Equal(t, n, admitted, "half_open_requests=%d", n)
		require.True(t, st.Is(CircuitHalfOpen))
		require.Equal(t, n, st.Probes)

		// One probe reports success: one more may be admitted.
		st = b.OnSuccess(now, st)
		st, ok, _ := b.Admit(now, st)
		require.True(t, ok)
		_, ok, _ = b.Admit(now, st)
		require.False(t, ok)
	}
}

func TestBreakerHalfOpenCloses(t *testing.T) {
	b := newBreaker(t, nil) // 5 / 3 / 30s / 3
	var st BreakerState
	for i := 0; i < 5; i++ {
		st = b.OnFailure(t0, st)
	}
	require.True(t, st.Is(CircuitOpen))
	now := t0.Add(30 * time.Second)
	for i := 0; i < 3; i++ {
		var ok bool
		st, ok, _ = b.Admit(now, st)
		require.True(t, ok)
	}
	st = b.OnSuccess(now, st)
	st = b.OnSuccess(now, st)
	require.True(t, st.Is(CircuitHalfOpen))
	st = b.OnSuccess(now, st)
	require.Equal(t, BreakerState{State: CircuitClosed}, st)
}

func TestBreakerProbeFailureReopens(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 2, Timeout: messages.MustDuration("10s")})
	st := b.OnFailure(t0, b.OnFailure(t0, BreakerState{}))
	now := t0.Add(10 * time.Second)
	st, ok, _ := b.Admit(now, st)
	require.True(t, ok)
	st = b.OnSuccess(now, st)
	st, _, _ = b.Admit(now, st)
	st = b.OnFailure(now.Add(time.Second), st)
	require.True(t, st.Is(CircuitOpen))
	require.Equal(t, now.Add(time.Second), st.OpenedAt)
	_, ok, retryAt := b.Admit(now.Add(5*time.Second), st)
	require.False(t, ok)
	require.Equal(t, now.Add(11*time.Second), retryAt)
}

func TestBreakerLostProbesAreWrittenOff(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 1, HalfOpenRequests: 2, Timeout: messages.MustDuration("10s")})
	st := b.OnFailure(t0, BreakerState{})
	half := t0.Add(10 * time.Second)
	st, _, _ = b.Admit(half, st)
	st, _, _ = b.Admit(half, st)
	_, ok, _ := b.Admit(half.Add(9*time.Second), st)
	require.False(t, ok)
	st, ok, _ = b.Admit(half.Add(10*time.Second), st) // the two probes never reported
	require.True(t, ok)
	require.Equal(t, 1, st.Probes)
}

func TestBreakerStateJSON(t *testing.T) {
	st := BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0.Add(time.Minute), Probes: 2, Successes: 1}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"half_open","failures":0,"opened_at":"2025-01-02T03:04:05Z","half_open_at":"2025-01-02T03:05:05Z","probes":2,"successes":1}`, string(b))
	var back BreakerState
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, st, back)

	b, err = json.Marshal(BreakerState{})
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"","failures":0,"probes":0,"successes":0}`, string(b))
	require.True(t, BreakerState{}.Is(CircuitClosed))
}

func TestNewBreakerInvalid(t *testing.T) {
	_, err := NewBreaker(&messages.CircuitBreakerConfig{FailureThreshold: -1, Timeout: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "failure_threshold")
	require.ErrorContains(t, err, "timeout")
	b := newBreaker(t, &messages.CircuitBreakerConfig{})
	require.Equal(t, DefaultBreakerTimeout, b.Timeout())
}

// An ignored outcome (the item's own fault, a snooze) counts as neither:
// closed keeps its consecutive failures, open is untouched, and a half-open
// probe frees its slot without counting a success.
func TestBreakerIgnoredOutcomes(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, HalfOpenRequests: 1, Timeout: messages.MustDuration("10s")})
	tests := []struct {
		name string
		st   BreakerState
		want BreakerState
	}{
		{"closed, no failures", BreakerState{}, BreakerState{}},
		{"closed keeps its failures", BreakerState{State: CircuitClosed, Failures: 1}, BreakerState{State: CircuitClosed, Failures: 1}},
		{"open is untouched", BreakerState{State: CircuitOpen, OpenedAt: t0}, BreakerState{State: CircuitOpen, OpenedAt: t0}},
		{"half-open frees the probe slot", BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0, Probes: 1},
			BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0}},
		{"half-open with no slot out stays", BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0},
			BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, b.OnIgnored(t0.Add(time.Second), tt.st))
		})
	}

	// A freed slot admits the next probe, and a second failure after an
	// ignored outcome still opens a closed breaker.
	half := BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: t0.Add(10 * time.Second), Probes: 1}
	_, ok, _ := b.Admit(t0.Add(11*time.Second), half)
	require.False(t, ok, "the one slot is out")
	_, ok, _ = b.Admit(t0.Add(11*time.Second), b.OnIgnored(t0.Add(11*time.Second), half))
	require.True(t, ok, "freed by the ignored outcome")
	st := b.OnFailure(t0, BreakerState{})
	st = b.OnIgnored(t0, st)
	require.True(t, b.OnFailure(t0, st).Is(CircuitOpen))
}

// Settle counts a half-open period's probes and nothing else there; in the
// other states every ticket's outcome counts as On* says.
func TestBreakerSettleCountsOnlyThisPeriodsProbes(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, HalfOpenRequests: 1, Timeout: messages.MustDuration("10s")})
	closed := BreakerState{}
	require.Equal(t, Ticket{}, TicketOf(closed))

	// Closed: failures count whatever the ticket.
	st := b.Settle(t0, closed, Ticket{}, OutcomeFailure)
	require.Equal(t, 1, st.Failures)
	require.Equal(t, st, b.Settle(t0, st, Ticket{}, OutcomeIgnored), "ignored changes nothing while closed")
	require.True(t, b.Settle(t0, st, Ticket{}, OutcomeFailure).Is(CircuitOpen))

	// Half-open: the probe admitted into it is counted.
	open := BreakerState{State: CircuitOpen, OpenedAt: t0}
	half, ok, _ := b.Admit(t0.Add(10*time.Second), open)
	require.True(t, ok)
	probe := TicketOf(half)
	require.Equal(t, Ticket{Probe: true, Epoch: t0.Add(10 * time.Second)}, probe)
	require.True(t, b.Settle(t0.Add(11*time.Second), half, probe, OutcomeSuccess).Is(CircuitClosed))
	require.True(t, b.Settle(t0.Add(11*time.Second), half, probe, OutcomeFailure).Is(CircuitOpen))
	freed := b.Settle(t0.Add(11*time.Second), half, probe, OutcomeIgnored)
	require.Zero(t, freed.Probes, "an ignored probe frees its slot")

	// Half-open: a straggler admitted while closed, or a probe of an earlier
	// period, leaves the state alone.
	for _, tk := range []Ticket{{}, {Probe: true, Epoch: t0}} {
		for _, o := range []Outcome{OutcomeSuccess, OutcomeFailure, OutcomeIgnored} {
			require.Equal(t, half, b.Settle(t0.Add(11*time.Second), half, tk, o))
		}
	}
}

// A breaker state opened in the future (written by hand into the shared
// bucket: "open until 2099") keeps the breaker open for at most its
// timeout from now, and the state Admit returns says so, to be stored.
func TestBreakerOpenedInTheFutureIsBoundedByTheTimeout(t *testing.T) {
	b := newBreaker(t, &messages.CircuitBreakerConfig{FailureThreshold: 1, HalfOpenRequests: 1, Timeout: messages.MustDuration("10s")})
	forged := BreakerState{State: CircuitOpen, OpenedAt: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)}
	next, ok, retryAt := b.Admit(t0, forged)
	require.False(t, ok)
	require.Equal(t, t0.Add(10*time.Second), retryAt)
	require.Equal(t, BreakerState{State: CircuitOpen, OpenedAt: t0}, next)
	_, ok, _ = b.Admit(t0.Add(10*time.Second), next)
	require.True(t, ok, "half-open after the timeout: a probe runs")

	halfOpen := BreakerState{State: CircuitHalfOpen, OpenedAt: t0, HalfOpenAt: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), Probes: 1}
	next, ok, retryAt = b.Admit(t0, halfOpen)
	require.False(t, ok)
	require.False(t, retryAt.After(t0.Add(10*time.Second)))
	require.Equal(t, t0, next.HalfOpenAt)
	_, ok, _ = b.Admit(t0.Add(10*time.Second), next)
	require.True(t, ok, "the lost probe is written off a timeout after now")
}
