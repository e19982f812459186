package itemrun

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A cut meets every item in its retry path: the link logs one warning for
// the whole cut, and an item-level failure that is the cut is reported as
// such (its own line goes to debug), while any other failure is not.
func TestLinkLogsOneWarningPerCut(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).Level(zerolog.InfoLevel)
	l := newLinkState(log, "hub")
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }

	for i := 0; i < 50; i++ {
		require.True(t, l.unreachableItem(nats.ErrNoResponders, "item state"))
	}
	require.False(t, l.unreachableItem(errors.New("maximum bytes exceeded"), "item state"),
		"a failure that is not the hub going away is the item's own")
	require.False(t, l.unreachableItem(nil, "item state"))
	require.True(t, l.down())
	require.Equal(t, 1, strings.Count(buf.String(), `"level":"warn"`), buf.String())

	now = now.Add(42 * time.Second)
	l.answered()
	require.False(t, l.down())
	require.Contains(t, buf.String(), `"down_for":42000`)

	var nilLink *linkState
	require.False(t, nilLink.unreachableItem(nats.ErrNoResponders, "item state"), "a nil link records nothing")
}
