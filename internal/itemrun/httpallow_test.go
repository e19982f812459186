package itemrun

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/httpstep"
	"github.com/jetfleet/jetfleet/internal/retry"
)

// The agent's built-in http step goes through the guard of its
// Config.HTTPAllow (internal/httpstep): a loopback address is refused for
// good unless the list names it; a list entry that is not an address is
// a config error naming the entry.
func TestHTTPStepFollowsTheAgentsAllowList(t *testing.T) {
	var calls atomic.Int32
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte("local"))
	}))
	defer local.Close()
	call := &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(`{}`), With: map[string]any{"url": local.URL + "/varz"}}

	_, err := New(nil, Config{}).httpStep(context.Background(), call)
	require.ErrorIs(t, err, httpstep.ErrAddressRefused)
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.Zero(t, calls.Load(), "the local server was called")

	out, err := New(nil, Config{HTTPAllow: []string{"127.0.0.0/8"}}).httpStep(context.Background(), call)
	require.NoError(t, err)
	require.Equal(t, "local", out)

	require.ErrorContains(t, Config{HTTPAllow: []string{"x"}}.WithDefaults().Validate(), "http_allow[0]")
}
