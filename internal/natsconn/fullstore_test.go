package natsconn

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A refusal for want of room is remembered through the unanswered writes
// that follow it (the stream has no leader since), and forgotten by a
// write that succeeds, by one that fails otherwise, and by Forget.
func TestFullStore(t *testing.T) {
	full := &jetstream.APIError{Code: 500, ErrorCode: errCodeInsufficientResources, Description: "insufficient resources"}
	conflict := &jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}
	var f FullStore
	require.NoError(t, f.Err())
	f.Observe(context.DeadlineExceeded)
	require.NoError(t, f.Err(), "unanswered with no refusal before: a cut-off server, not a full store")
	f.Observe(full)
	require.Equal(t, full, f.Err())
	f.Observe(context.DeadlineExceeded)
	f.Observe(jetstream.ErrNoStreamResponse)
	require.Equal(t, full, f.Err(), "unanswered since the refusal: still full")
	f.Observe(nil)
	require.NoError(t, f.Err(), "a write stored: there is room")
	f.Observe(full)
	f.Observe(conflict)
	require.NoError(t, f.Err(), "the stream answered: it has a leader again")
	f.Observe(full)
	f.Forget()
	require.NoError(t, f.Err())
}

// A refusal is forgotten by a write stored after it, not by one before.
func TestFullStoreForgetBefore(t *testing.T) {
	full := &jetstream.APIError{Code: 500, ErrorCode: errCodeInsufficientResources}
	var f FullStore
	before := time.Now().Add(-time.Minute)
	f.Observe(full)
	f.ForgetBefore(before)
	require.Equal(t, full, f.Err())
	f.ForgetBefore(time.Now().Add(time.Second))
	require.NoError(t, f.Err())
}
