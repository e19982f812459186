// Package kvwatch follows a KV watch until its context ends.
package kvwatch

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Follow calls fn with every entry from updates until ctx ends or updates
// is closed. nats.go closes Updates from the subscription's closed handler,
// which runs on the connection's callback goroutine and may never come (a
// connection already gone): ctx ends the loop either way. The nil entry
// that marks the end of the initial values is skipped.
func Follow(ctx context.Context, updates <-chan jetstream.KeyValueEntry, fn func(jetstream.KeyValueEntry)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				return
			}
			if e != nil {
				fn(e)
			}
		}
	}
}
