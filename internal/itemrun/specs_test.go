package itemrun

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The agent reads a job's spec from its pool's specs bucket, and a job
// record of the previous layout (a job a coordinator of the earlier
// release accepted, with no spec record) from the jobs bucket: both run.
// A map_ended heard before a spec record's acceptance time was an earlier
// job's of the same id; one heard after it is this job's.
func TestJobCacheReadsSpecsAndRecordsOfThePreviousLayout(t *testing.T) {
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := messages.MustNames("")
	js := srv.JS()
	require.NoError(t, provision.Ensure(ctx, js, names, provision.Config{DLQMaxBytes: 1 << 20}))
	c := newJobCache(nil, nil)
	c.specs = newSpecSource(js, names, "p", nil)
	c.legacy = &legacyRecords{js: js, names: names, apiPrefix: "$JS.API."}

	// The pool has no specs bucket yet: the job record is read.
	jobs, err := js.KeyValue(ctx, names.JobsBucket())
	require.NoError(t, err)
	old, err := json.Marshal(wire.JobRecord{Spec: &messages.JobSpec{ID: "old", Pool: "p", AgentTemplate: []messages.Step{{Handler: "h"}}},
		Status: messages.JobStatus{ID: "old", State: messages.StateRunning, Budget: messages.BudgetStatus{Total: 7}}})
	require.NoError(t, err)
	_, err = jobs.Put(ctx, "old", old)
	require.NoError(t, err)
	j, err := c.get(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, 7, j.budget.Total)

	// A spec record: read from the pool's bucket, never the job record.
	specs, err := provision.EnsureSpecs(ctx, js, names, "p", provision.Config{})
	require.NoError(t, err)
	accepted := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	put := func(at time.Time) {
		t.Helper()
		data, err := json.Marshal(wire.SpecRecord{V: 1, Spec: &messages.JobSpec{ID: "new", Pool: "p", AgentTemplate: []messages.Step{{Handler: "h"}}},
			BudgetTotal: 3, BudgetShares: map[string]int{"p": 3}, AcceptedAt: at})
		require.NoError(t, err)
		_, err = specs.Put(ctx, "new", data)
		require.NoError(t, err)
	}
	put(accepted)
	j, err = c.get(ctx, "new")
	require.NoError(t, err)
	require.Equal(t, 3, j.budget.Total)
	total, _, ok := c.budgetLimits("p.new")
	require.True(t, ok)
	require.Equal(t, 3, total)
	_, err = c.get(ctx, "old")
	require.NoError(t, err, "the cache keeps the record it read")

	// This job's map phase ended after its acceptance: it stays ended.
	c.markEndedAt("new", accepted.Add(time.Minute))
	c.forget("new")
	_, err = c.get(ctx, "new")
	require.NoError(t, err)
	require.True(t, c.isEnded("new"))
	// A new job of that id, accepted later: the end was the earlier one's.
	c.forget("new")
	put(accepted.Add(time.Hour))
	_, err = c.get(ctx, "new")
	require.NoError(t, err)
	require.False(t, c.isEnded("new"))

	// No spec and no record: gone.
	_, err = c.get(ctx, "none")
	require.ErrorIs(t, err, errJobNotFound)
}

// An agent under role keys of the previous release, which name no specs
// bucket but the jobs bucket, beside a coordinator of this release that
// made the pool's specs bucket and wrote the spec there and in the job
// record: the server refuses the bucket's info at once and the job record
// is read, well within a deadline shorter than a request's timeout
// (docs/deploy.md, "Upgrades").
func TestJobCacheReadsRecordsWhenTheSpecsBucketIsRefused(t *testing.T) {
	srv := fleettest.RunServer(t,
		fleettest.WithConfig(func(o *server.Options) {
			o.Users = append(o.Users,
				&server.User{Username: "admin", Password: "admin"},
				&server.User{Username: "old", Password: "old", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.INFO.KV_fleet_specs_p", "$JS.API.*.*.KV_fleet_specs_p.>", "$KV.fleet_specs_p.>"}},
				}})
		}),
		fleettest.WithConnectOptions(nats.UserInfo("admin", "admin")))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := messages.MustNames("")
	require.NoError(t, provision.Ensure(ctx, srv.JS(), names, provision.Config{DLQMaxBytes: 1 << 20}))
	specs, err := provision.EnsureSpecs(ctx, srv.JS(), names, "p", provision.Config{})
	require.NoError(t, err)
	spec := &messages.JobSpec{ID: "j", Pool: "p", AgentTemplate: []messages.Step{{Handler: "h"}}}
	data, err := json.Marshal(wire.SpecRecord{V: 1, Spec: spec, BudgetTotal: 3})
	require.NoError(t, err)
	_, err = specs.Put(ctx, "j", data)
	require.NoError(t, err)
	jobs, err := srv.JS().KeyValue(ctx, names.JobsBucket())
	require.NoError(t, err)
	rec, err := json.Marshal(wire.JobRecord{Spec: spec, Status: messages.JobStatus{ID: "j", State: messages.StateRunning, Budget: messages.BudgetStatus{Total: 5}}})
	require.NoError(t, err)
	_, err = jobs.Put(ctx, "j", rec)
	require.NoError(t, err)

	nc := srv.Connect(t, nats.UserInfo("old", "old"))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	denials := natsconn.WatchDenials(nc)
	c := newJobCache(nil, nil)
	c.specs = newSpecSourceDenied(js, names, "p", nil, denials, "$JS.API.")
	c.legacy = &legacyRecords{js: js, names: names, apiPrefix: "$JS.API.", denials: denials}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	j, err := c.get(short, "j")
	require.NoError(t, err)
	require.Equal(t, 5, j.budget.Total, "the job record's, not the spec record's")
}
