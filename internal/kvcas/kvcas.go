// Package kvcas is jetfleet's one reading of a KV compare-and-set: a write
// at a revision, and whether its failure is a conflict (read again and
// decide again), permanent (give up), or neither (in doubt: a timeout, a
// lost reply, a leader election — retry, or find out whether it was
// stored).
//
// nats.go (v1.55) reports a refused compare-and-set in three ways
// (docs/jetstream.md §10):
//
//   - Update (and Delete/Purge with a revision) wraps the server's error
//     with jetstream.ErrKeyRevisionMismatch, for API error 10071 (one node)
//     and 10164 (a replicated bucket, while an earlier write to the key is
//     in flight).
//   - Create wraps it with jetstream.ErrKeyExists. The trap: ErrKeyExists
//     matches any error with code 10071, so on one node an Update conflict
//     matches it too, and a check written against ErrKeyExists passes its
//     tests there and misses the 10164 conflicts of three nodes.
//   - Create of a key whose last entry is a delete marker writes at the
//     marker's revision and returns the server's error unwrapped: a 10164
//     there matches neither sentinel.
//
// [IsConflict] covers all three; nothing else in jetfleet tests these
// errors itself.
package kvcas

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Store is the part of a jetstream.KeyValue that [Write] uses.
type Store interface {
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// Write stores value under key if the key is at revision rev, and returns
// the new revision. Revision 0 means the key must not exist, or hold a
// delete marker (Create); any other, that rev is the key's latest
// (Update). A refused write satisfies [IsConflict].
func Write(ctx context.Context, kv Store, key string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		return kv.Create(ctx, key, value)
	}
	return kv.Update(ctx, key, value, rev)
}

// IsConflict reports a compare-and-set refused because the key was not at
// the expected revision: someone else wrote it, or (on a replicated
// bucket) an earlier write to it was still in flight. Read the key again
// and decide again.
func IsConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// IsPermanent reports a failed KV request that retrying will not fix: no
// such bucket, an invalid key, a connection closed for good, a cancelled
// context, or another request error the server refused (API status 4xx),
// conflicts excepted. Timeouts, "no responders" and 503s (no leader yet)
// are not permanent.
func IsPermanent(err error) bool {
	switch {
	case err == nil, IsConflict(err):
		return false
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrInvalidKey),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, context.Canceled):
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code > 0 && apiErr.Code < 500
}
