// Package kvwatch follows a KV watch until its context ends.
package kvwatch

import (
	"context"
	"errors"

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

// ErrClosed is returned by Watch when the watch ends before ctx.
var ErrClosed = errors.New("kvwatch: the watch was closed")

// Watch follows w until ctx ends (nil) or the watch is closed (ErrClosed),
// calling fn with every entry and onReady (if not nil) at the end of the
// initial values, then stops w.
func Watch(ctx context.Context, w jetstream.KeyWatcher, onReady func(), fn func(jetstream.KeyValueEntry)) error {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return ErrClosed
			}
			if e == nil {
				if onReady != nil {
					onReady()
				}
				continue
			}
			fn(e)
		}
	}
}
