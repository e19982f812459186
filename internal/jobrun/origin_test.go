package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Each item may be reported by the pool it was routed to (or by the
// coordinator) and by no other; a reduce by the job's pool.
func TestItemPoolsFollowTheRoutes(t *testing.T) {
	t.Parallel()
	items := []json.RawMessage{
		json.RawMessage(`{"id": "a", "r": "gpu"}`), json.RawMessage(`{"id": "b", "r": "eu"}`),
		json.RawMessage(`{"id": "c", "r": "arm"}`), json.RawMessage(`{"id": "d", "r": "gpu"}`),
	}
	spec := jobspec.WithDefaults(&messages.JobSpec{Pool: "cpu", GroupBy: "${item.r}", Items: items})
	rec := &wire.JobRecord{Spec: spec, Routes: map[string]string{"gpu": "gpu", "arm": "arm"},
		Status: messages.JobStatus{Items: 4}}
	p := buildItemPools(context.Background(), nil, rec, zerolog.Nop())
	require.True(t, p.known)
	for idx, want := range []string{"gpu", "cpu", "arm", "gpu"} {
		require.Equal(t, want, p.of(int64(idx)), "item %d", idx)
		for _, pool := range []string{"gpu", "cpu", "arm", "other"} {
			require.Equal(t, pool == want, p.allows(int64(idx), pool), "item %d from %s", idx, pool)
		}
		require.True(t, p.mayReport(int64(idx), messages.CoordinatorOrigin))
	}
	require.Equal(t, "", p.of(4), "outside the job")
	require.False(t, p.allows(-1, "cpu"))

	// A job without routes needs no input: every item is on its pool.
	plain := buildItemPools(context.Background(), nil, &wire.JobRecord{Spec: jobspec.WithDefaults(&messages.JobSpec{Pool: "cpu"})}, zerolog.Nop())
	require.Equal(t, "cpu", plain.of(123))
	require.False(t, plain.allows(0, "gpu"))

	// An input that cannot be read: any of the job's pools, and no other.
	broken := func(context.Context, string) (io.ReadCloser, error) { return nil, errors.New("gone") }
	rec.Spec = jobspec.WithDefaults(&messages.JobSpec{Pool: "cpu", GroupBy: "${item.r}", Input: "objstore://fleet_inputs/x"})
	u := buildItemPools(context.Background(), broken, rec, zerolog.Nop())
	require.False(t, u.known)
	require.True(t, u.allows(0, "arm"))
	require.True(t, u.allows(0, "cpu"))
	require.False(t, u.allows(0, "other"))
}

// admits: agents report their pool's items only; reopen markers and the
// coordinator's own results come from the coordinator.
func TestAdmits(t *testing.T) {
	t.Parallel()
	r := testRunner(t, &messages.JobSpec{Pool: "cpu"}, 3, nil)
	r.pools = buildItemPools(context.Background(), nil, &r.rec, zerolog.Nop())
	ok := &messages.Result{Index: 1, Outcome: messages.OutcomeSucceeded}
	require.True(t, r.admits(ok, "cpu"))
	require.False(t, r.admits(ok, "gpu"))
	require.True(t, r.admits(ok, messages.CoordinatorOrigin))
	require.False(t, r.admits(ok, ""), "a subject without an origin")
	reopen := &messages.Result{Index: 1, Outcome: messages.OutcomeReopened, Generation: 1}
	require.False(t, r.admits(reopen, "cpu"))
	require.True(t, r.admits(reopen, messages.CoordinatorOrigin))
	reduce := &messages.Result{Index: -1, Phase: messages.PhaseReduce, Outcome: messages.OutcomeSucceeded}
	require.True(t, r.admits(reduce, "cpu"))
	require.False(t, r.admits(reduce, "gpu"))
}
