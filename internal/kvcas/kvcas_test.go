package kvcas_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/kvcas"
)

// The errors as nats.go v1.55 builds them (jetstream/kv.go, publish.go):
// the server's API error wrapped by PublishMsg, then by Update or Create.
func apiErr(code jetstream.ErrorCode, status int) error {
	return fmt.Errorf("nats: %w", &jetstream.APIError{Code: status, ErrorCode: code, Description: "wrong last sequence"})
}

var (
	r1Refusal = apiErr(jetstream.JSErrCodeStreamWrongLastSequence, 400)         // 10071
	r3Refusal = apiErr(jetstream.JSErrCodeStreamWrongLastSequenceConstant, 400) // 10164
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		conflict  bool
		permanent bool
		keyExists bool // what errors.Is(err, jetstream.ErrKeyExists) says: the trap
	}{
		{name: "nil", err: nil},
		{name: "Update on one node (10071)", err: fmt.Errorf("%w: %w", r1Refusal, jetstream.ErrKeyRevisionMismatch), conflict: true, keyExists: true},
		{name: "Update on three nodes (10164)", err: fmt.Errorf("%w: %w", r3Refusal, jetstream.ErrKeyRevisionMismatch), conflict: true, keyExists: false},
		{name: "Create of an existing key (10071)", err: fmt.Errorf("%w: %s", r1Refusal, "key exists"), conflict: true, keyExists: true},
		{name: "Create of an existing key (10164)", err: fmt.Errorf("%w: %w", r3Refusal, jetstream.ErrKeyExists), conflict: true, keyExists: true},
		{name: "Create over a delete marker, unwrapped 10164", err: r3Refusal, conflict: true, keyExists: false},
		{name: "Create over a delete marker, unwrapped 10071", err: r1Refusal, conflict: true, keyExists: true},
		{name: "the sentinel alone", err: jetstream.ErrKeyRevisionMismatch, conflict: true},
		{name: "wrapped by a caller", err: fmt.Errorf("budget: update j: %w", fmt.Errorf("%w: %w", r3Refusal, jetstream.ErrKeyRevisionMismatch)), conflict: true},
		{name: "no such bucket", err: jetstream.ErrBucketNotFound, permanent: true},
		{name: "invalid key", err: fmt.Errorf("x: %w", jetstream.ErrInvalidKey), permanent: true},
		{name: "connection closed", err: nats.ErrConnectionClosed, permanent: true},
		{name: "cancelled", err: context.Canceled, permanent: true},
		{name: "another 4xx", err: apiErr(10059, 404), permanent: true},
		{name: "no leader yet (503)", err: apiErr(10008, 503)},
		{name: "timeout", err: context.DeadlineExceeded},
		{name: "nats timeout", err: nats.ErrTimeout},
		{name: "no responders", err: jetstream.ErrNoStreamResponse},
		{name: "some error", err: errors.New("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.conflict, kvcas.IsConflict(tt.err), "IsConflict")
			require.Equal(t, tt.permanent, kvcas.IsPermanent(tt.err), "IsPermanent")
			if tt.err != nil && tt.conflict {
				require.Equal(t, tt.keyExists, errors.Is(tt.err, jetstream.ErrKeyExists), "ErrKeyExists")
			}
		})
	}
}

// fakeStore records which call Write made.
type fakeStore struct{ calls []string }

func (f *fakeStore) Create(_ context.Context, key string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	f.calls = append(f.calls, "create "+key)
	return 1, nil
}

func (f *fakeStore) Update(_ context.Context, key string, _ []byte, rev uint64) (uint64, error) {
	f.calls = append(f.calls, fmt.Sprintf("update %s@%d", key, rev))
	return rev + 1, nil
}

func TestWriteChoosesCreateOrUpdate(t *testing.T) {
	var f fakeStore
	rev, err := kvcas.Write(context.Background(), &f, "a", nil, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev)
	rev, err = kvcas.Write(context.Background(), &f, "b", nil, 7)
	require.NoError(t, err)
	require.EqualValues(t, 8, rev)
	require.Equal(t, []string{"create a", "update b@7"}, f.calls)
}
