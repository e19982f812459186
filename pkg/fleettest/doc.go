// Package fleettest runs jetfleet and real NATS JetStream servers inside
// `go test`: a whole fleet — server, coordinator and agents with your
// handlers — with a client ([RunFleet]), a single node ([RunServer]) and an
// in-process cluster ([RunCluster]) for replicated streams and KV buckets.
//
//	func TestShout(t *testing.T) {
//		f := fleettest.RunFleet(t, map[string]agent.HandlerFunc{"shout": agent.Typed(shout)})
//		st := f.Run(t, &messages.JobSpec{Items: items, AgentTemplate: []messages.Step{{Handler: "shout"}}}, time.Minute)
//		require.Equal(t, messages.StateSucceeded, st.State)
//	}
//
// Servers listen on random localhost ports, keep their JetStream files in a
// fresh directory (unless [WithStoreDir] says otherwise) and are shut down, with
// every connection they handed out, when the test ends (t.Cleanup). Nothing
// needs to be installed: the server is github.com/nats-io/nats-server/v2
// linked into the test binary. That directory is on /dev/shm when it is a
// memory file system with 4 GiB free (the file store makes and deletes files
// at a rate that costs a disk file system much CPU), else in t.TempDir();
// the environment variable JETFLEET_TEST_STORE_ROOT names another parent
// directory, or "tempdir" for t.TempDir(). It is removed when the test ends.
//
//	func TestPublish(t *testing.T) {
//		srv := fleettest.RunServer(t)
//		_, err := srv.JS().CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
//		...
//		srv.Restart(t) // same port and store: file-stored streams survive
//	}
//
// A cluster needs a few seconds to elect its meta leader; [RunCluster] waits
// for that, and for every node to be known to the leader, before it returns.
// Stopping the leader of a replicated stream with [Cluster.StopNode] costs a
// Raft election (4–9 s with nats-server's default timeouts); moving
// leadership with [Cluster.StepDownStreamLeader] takes milliseconds.
//
// Wait for outcomes with [WaitFor] (a polling loop with a deadline), never
// with a bare sleep.
//
// The helpers call t.Fatal on failure, so call them from the test's own
// goroutine.
package fleettest
