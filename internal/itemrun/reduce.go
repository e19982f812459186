package itemrun

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// prepareReduce fetches the map results of a reduce item into a local file
// for ${map.results} and fills the item's ${map.*} values. cleanup removes
// the file.
func (a *Agent) prepareReduce(ctx context.Context, it *item) (cleanup func(), err error) {
	in := it.wi.Reduce
	obs, err := a.js.ObjectStore(ctx, a.names.ReduceBucket(a.cfg.Pool))
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", a.names.ReduceBucket(a.cfg.Pool), err)
	}
	dir, err := os.MkdirTemp(a.cfg.WorkDir, "jetfleet-reduce-")
	if err != nil {
		return nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	path := filepath.Join(dir, "map-results.json")
	if err := obs.GetFile(ctx, in.ResultsObject, path); err != nil {
		cleanup()
		return nil, fmt.Errorf("map results %s: %w", in.ResultsObject, err)
	}
	it.mv = &shell.MapVars{
		Results:    path,
		Successful: int(in.Successful),
		Failed:     int(in.Failed),
		Total:      int(in.Items),
	}
	return cleanup, nil
}

func mapResults(mv *shell.MapVars) *MapResults {
	if mv == nil {
		return nil
	}
	return &MapResults{Path: mv.Results, Successful: mv.Successful, Failed: mv.Failed, Total: mv.Total}
}

// watchEnded follows map_ended events so that prefetched first-generation
// items of a stopped, cancelled or early-completed job are not started,
// and so that a long-lived agent forgets what it cached of the job: its
// spec, budget (and the job's remaining-budget gauge) and breaker state.
// What comes later (a reduce item, a straggler, a replay) reads them again.
// A missed event costs nothing but the item's run and the cache entry: the
// coordinator purges the job's queued items and counts late results.
//
// An event with kill set (a cancel with kill) also terminates the job's
// map items running here (killSwitch); one this agent misses leaves them
// to finish, as a cancel without kill does.
func (a *Agent) watchEnded() (stop func(), err error) {
	sub, err := a.nc.Subscribe(a.names.EventSubject("*", messages.EventMapEnded), func(m *nats.Msg) {
		job := m.Header.Get(messages.HeaderJobID)
		if job == "" {
			return
		}
		a.jobs.markEndedAt(job, mapEndedAt(m.Data)) // before the kill: see killSwitch.track
		a.jobs.forget(job)
		a.budget.Forget(budget.Key(a.cfg.Pool, job))
		a.breakers.forget(job)
		if mapEndedKill(m.Data) {
			n := a.kills.kill(job)
			a.log.Info().Str("job_id", job).Int("items", n).Msg("job cancelled with kill: terminating its running steps")
		}
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// mapEndedKill reports whether a map_ended event's body asks for a kill.
func mapEndedKill(body []byte) bool {
	var ev messages.Event
	var data messages.MapPhaseEndedEvent
	if json.Unmarshal(body, &ev) != nil || json.Unmarshal(ev.Data, &data) != nil {
		return false
	}
	return data.Kill
}
