package provision_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ensureSetup is a server, a context bounded for the test, the default
// prefix's names and a small DLQ's provisioning config.
func ensureSetup(t *testing.T) (*fleettest.Server, context.Context, messages.Names, provision.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	names, err := messages.NewNames("fleet")
	require.NoError(t, err)
	return fleettest.RunServer(t), ctx, names, provision.Config{DLQMaxBytes: 1 << 20}
}

// An existing deployment provisioned with age limits on results and
// inputs (before retention became per job) loses them at the next start,
// and its jobs bucket gains per-message TTLs.
func TestEnsureLiftsAgeLimitsOfExistingDeployment(t *testing.T) {
	srv, ctx, names, cfg := ensureSetup(t)
	js := srv.JS()

	// The old configuration: results and inputs aged out after Retention.
	for _, sc := range provision.Streams(names, cfg) {
		if sc.Name == names.ResultsStream() {
			sc.MaxAge = provision.DefaultRetention
		}
		_, err := js.CreateStream(ctx, sc)
		require.NoError(t, err)
	}
	for _, kc := range provision.Buckets(names, cfg) {
		kc.LimitMarkerTTL = 0
		_, err := js.CreateKeyValue(ctx, kc)
		require.NoError(t, err)
	}
	for _, oc := range provision.ObjectStores(names, cfg) {
		oc.TTL = provision.DefaultRetention
		_, err := js.CreateObjectStore(ctx, oc)
		require.NoError(t, err)
	}

	require.NoError(t, provision.Ensure(ctx, js, names, cfg))

	results, err := js.Stream(ctx, names.ResultsStream())
	require.NoError(t, err)
	require.Zero(t, results.CachedInfo().Config.MaxAge, "results are kept while their job is open")
	inputs, err := js.Stream(ctx, "OBJ_"+names.InputsBucket())
	require.NoError(t, err)
	require.Zero(t, inputs.CachedInfo().Config.MaxAge, "inputs are kept while their job is open")
	jobs, err := js.Stream(ctx, "KV_"+names.JobsBucket())
	require.NoError(t, err)
	require.True(t, jobs.CachedInfo().Config.AllowMsgTTL, "deleted records' markers expire")

	// A purge marker with a TTL is accepted.
	kv, err := js.KeyValue(ctx, names.JobsBucket())
	require.NoError(t, err)
	_, err = kv.Put(ctx, "j1", []byte("{}"))
	require.NoError(t, err)
	require.NoError(t, kv.Purge(ctx, "j1", jetstream.PurgeTTL(time.Second)))
}

// A second Ensure over streams already configured as asked updates none of
// them (every coordinator runs Ensure at its start, several at once); a
// changed setting is still applied.
func TestEnsureLeavesUnchangedStreamsAlone(t *testing.T) {
	srv, ctx, names, cfg := ensureSetup(t)
	js := srv.JS()
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))

	spy := srv.Connect(t)
	updates, err := spy.SubscribeSync("$JS.API.STREAM.UPDATE.*")
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	updated := func() map[string]int {
		require.NoError(t, spy.Flush())
		got := map[string]int{}
		for {
			m, err := updates.NextMsg(100 * time.Millisecond)
			if err != nil {
				return got
			}
			got[m.Subject[len("$JS.API.STREAM.UPDATE."):]]++
		}
	}

	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	got := updated()
	for _, sc := range provision.Streams(names, cfg) {
		require.Zero(t, got[sc.Name], "stream %s updated though unchanged", sc.Name)
	}
	for _, kc := range provision.Buckets(names, cfg) {
		require.Zero(t, got["KV_"+kc.Bucket], "bucket %s updated though unchanged", kc.Bucket)
	}
	for _, oc := range provision.ObjectStores(names, cfg) {
		require.Zero(t, got["OBJ_"+oc.Bucket], "object store %s updated though unchanged", oc.Bucket)
	}

	cfg.DLQMaxAge = 48 * time.Hour
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	require.Equal(t, 1, updated()[names.DLQStream()])
	s, err := js.Stream(ctx, names.DLQStream())
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, s.CachedInfo().Config.MaxAge)
}

// An existing deployment, whose buckets and object stores nats.go made
// with rollups allowed and whose pools shared one park stream, refuses
// rollups where a client other than the coordinator writes after the next
// Ensure, keeps the shared park stream as a source of the work stream
// while it exists, and gets a park stream per pool from EnsurePool.
func TestEnsureTurnsRollupsOffInExistingDeployment(t *testing.T) {
	srv, ctx, names, cfg := ensureSetup(t)
	js := srv.JS()
	for _, kc := range provision.Buckets(names, cfg) {
		_, err := js.CreateKeyValue(ctx, kc)
		require.NoError(t, err)
	}
	for _, oc := range provision.ObjectStores(names, cfg) {
		_, err := js.CreateObjectStore(ctx, oc)
		require.NoError(t, err)
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: wire.LegacyParkStream(names), Subjects: []string{names.Prefix + ".park.>"},
		Retention: jetstream.WorkQueuePolicy, AllowMsgSchedules: true, AllowRollup: true,
	})
	require.NoError(t, err)

	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	for _, b := range []string{names.ItemsBucket(), names.BudgetBucket(), names.BreakerBucket(), names.AgentsBucket(), names.ControlBucket()} {
		s, err := js.Stream(ctx, "KV_"+b)
		require.NoError(t, err)
		require.False(t, s.CachedInfo().Config.AllowRollup, b)
	}
	s, err := js.Stream(ctx, "OBJ_"+names.UploadsBucket())
	require.NoError(t, err)
	require.False(t, s.CachedInfo().Config.AllowRollup, "uploads")

	// The server refuses a rollup, and the bucket keeps its keys.
	kv, err := js.KeyValue(ctx, names.ItemsBucket())
	require.NoError(t, err)
	_, err = kv.Put(ctx, "default.j.a", []byte("{}"))
	require.NoError(t, err)
	m := nats.NewMsg("$KV." + names.ItemsBucket() + ".default.j.b")
	m.Header.Set("Nats-Rollup", "all")
	_, err = js.PublishMsg(ctx, m)
	require.ErrorContains(t, err, "rollup not permitted")
	_, err = kv.Get(ctx, "default.j.a")
	require.NoError(t, err)

	_, err = provision.EnsurePool(ctx, js, names, "gpu", cfg)
	require.NoError(t, err)
	park, err := js.Stream(ctx, names.ParkStream("gpu"))
	require.NoError(t, err)
	require.Equal(t, []string{wire.ParkFilter(names, "gpu")}, park.CachedInfo().Config.Subjects)
	var sources []string
	work, err := js.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	for _, src := range work.CachedInfo().Config.Sources {
		sources = append(sources, src.Name)
	}
	require.ElementsMatch(t, []string{wire.LegacyParkStream(names), names.ParkStream("gpu")}, sources)

	// A later Ensure keeps both sources.
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	work, err = js.Stream(ctx, names.WorkStream())
	require.NoError(t, err)
	require.Len(t, work.CachedInfo().Config.Sources, 2)
}

// Under role keys of the previous release the coordinator may not use a
// pool's dead-letter stream or specs bucket (docs/deploy.md, "Upgrades"):
// EnsurePoolPermitted skips both, without an error, and makes the rest.
func TestEnsurePoolPermittedSkipsWhatThePermissionsDoNotName(t *testing.T) {
	srv, ctx, names, cfg := ensureSetup(t)
	js := srv.JS()
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	var asked []string
	may := func(_ context.Context, stream string) bool { asked = append(asked, stream); return false }
	_, err := provision.EnsurePoolPermitted(ctx, js, names, "default", cfg, may)
	require.NoError(t, err)
	require.Equal(t, []string{wire.PoolDLQStream(names, "default"), "KV_" + names.SpecsBucket("default")}, asked)
	for _, name := range asked {
		_, err := js.Stream(ctx, name)
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound, name)
	}
	_, err = js.Stream(ctx, names.ParkStream("default"))
	require.NoError(t, err)
	_, err = js.Stream(ctx, "OBJ_"+names.ReduceBucket("default"))
	require.NoError(t, err)
}

// Each pool's dead-letter stream reserves its quota of the server's
// max_file_store when the pool is made. A pool that no longer fits is
// refused with an error that names the quota, what the account reserves
// already and the ways out; its reduce store and specs bucket, which
// reserve nothing, are made all the same, and so are the earlier pools'.
func TestEnsurePoolNamesTheDLQReservation(t *testing.T) {
	const quota = 16 << 20
	srv := fleettest.RunServer(t, fleettest.WithConfig(func(o *server.Options) { o.JetStreamMaxStore = 56 << 20 }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := messages.MustNames("")
	cfg := provision.Config{DLQMaxBytes: quota}
	js := srv.JS()
	require.NoError(t, provision.Ensure(ctx, js, names, cfg))
	for _, pool := range []string{"a", "b", "c"} {
		_, err := provision.EnsurePool(ctx, js, names, pool, cfg)
		require.NoError(t, err, "pool %s: 3 x 16 MiB fit in 56 MiB", pool)
	}
	_, err := provision.EnsurePool(ctx, js, names, "d", cfg)
	require.ErrorIs(t, err, provision.ErrDLQReservation)
	require.ErrorIs(t, err, provision.ErrParkStream, "the coordinator logs it and goes on")
	for _, want := range []string{"FLEET_DLQ_d", "DLQMaxBytes = 16 MiB", "max_file_store", "reserve 48 MiB already", "--dlq-max-bytes", "--max-pools"} {
		require.Contains(t, err.Error(), want)
	}
	_, err = js.Stream(ctx, wire.PoolDLQStream(names, "d"))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	_, err = js.Stream(ctx, "KV_"+names.SpecsBucket("d"))
	require.NoError(t, err, "the specs bucket reserves nothing: made all the same")
	_, err = js.Stream(ctx, names.ParkStream("d"))
	require.NoError(t, err)

	// No byte quota (-1): nothing reserved, the pool is made.
	_, err = provision.EnsurePool(ctx, js, names, "e", provision.Config{DLQMaxBytes: -1, DLQMaxMsgs: 10_000})
	require.NoError(t, err)
}
