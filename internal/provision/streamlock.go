package provision

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/keylock"
)

// A stream's configuration must not change while a consumer is added to
// it in the same process. nats-server 2.15.2 reads the stream's stored
// configuration without its lock while it adds a consumer
// (fileStore.ConsumerStore) and replaces it under the lock on an update
// (fileStore.UpdateConfig): harmless in a server built without the race
// detector (the name it reads is the same before and after), a data race
// in one built with it, as every test's embedded server is. A fleet in one
// process (the tests, the demo) has its coordinator add a pool's park
// stream to the work stream's sources while its agents create their work
// consumer, so provisioning takes LockStream around both.

// streamLocks serialise, per stream, provisioning's updates of a stream
// with the consumers added to it in this process. A stream is its name and
// its creation time: the streams of the same name on other servers (the
// parallel tests' fleets) do not wait for each other.
var streamLocks keylock.Map

// LockStream holds off this process's provisioning updates of stream name
// (and its other LockStream callers) until the returned func is called:
// take it around adding a consumer to a stream provisioning may update
// while the process runs (the work stream, the DLQ stream). It asks the
// server for the stream; when that fails there is no stream to hold and
// it holds nothing.
func LockStream(ctx context.Context, js jetstream.JetStream, name string) (unlock func()) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return func() {}
	}
	return lockStream(s.CachedInfo())
}

// lockStream is LockStream of the stream info describes.
func lockStream(info *jetstream.StreamInfo) (unlock func()) {
	return streamLocks.Lock(info.Config.Name + " " + info.Created.Format(time.RFC3339Nano))
}
