package lease

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// WriteErr keeps a refusal for want of room through the unanswered writes
// that follow it (a full store's stream has no leader after its first
// refusal), ignores lost races, and forgets it once a write is stored,
// by this process or another.
func TestWriteErrKeepsAFullStore(t *testing.T) {
	full := &jetstream.APIError{Code: 500, ErrorCode: 10023, Description: "insufficient resources"}
	var l Lease
	l.wrote(context.DeadlineExceeded)
	require.ErrorIs(t, l.WriteErr(), context.DeadlineExceeded, "no refusal before: a cut-off server")
	l.wrote(full)
	l.wrote(context.DeadlineExceeded)
	l.wrote(jetstream.ErrKeyExists) // a lost race says nothing
	require.Equal(t, full, l.WriteErr())
	l.othersWrote()
	require.NoError(t, l.WriteErr(), "another coordinator's write was stored: there is room")
	l.wrote(full)
	l.wrote(nil)
	require.NoError(t, l.WriteErr())
}
