package ui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestPauseAndResumeFromThePage(t *testing.T) {
	f := startFleet(t, Config{})
	ctx := t.Context()
	// The items wait at the gate until the job is resumed: the pause never
	// races their end.
	_, err := f.client.JobSubmit(ctx, []byte(`{"id": "pausable", "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}],
		"max_parallel": 1, "agent_template": [{"handler": "gated"}]}`))
	require.NoError(t, err)
	f.waitState(t, "pausable", messages.StateRunning)
	b := f.browser(t)
	_, body, _ := b.get("/jobs/pausable")
	require.Contains(t, body, ">Pause</button>")
	require.NotContains(t, body, ">Resume</button>")
	code, _, loc := b.post("/jobs/pausable/pause", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/jobs/pausable", loc)
	f.waitState(t, "pausable", messages.StatePaused)

	_, body, _ = b.get("/jobs/pausable")
	require.Contains(t, body, "paused by its job")
	require.Contains(t, body, ">Resume</button>")
	require.NotContains(t, body, ">Pause</button>")
	_, list, _ := b.get("/?state=paused")
	require.Contains(t, list, "pausable", "the list filters paused jobs")

	code, _, _ = b.post("/jobs/pausable/resume", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	f.waitState(t, "pausable", messages.StateRunning)
	f.gate.open()
	f.waitState(t, "pausable", messages.StateSucceeded)
	_, body, _ = b.get("/jobs/pausable")
	require.NotContains(t, body, ">Pause</button>", "a finished job cannot be paused")
}

func TestPausePoolFromTheAgentsPage(t *testing.T) {
	f := startFleet(t, Config{})
	ctx := t.Context()
	_, err := f.client.JobSubmit(ctx, []byte(`{"id": "pooljob", "items": [1], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	f.waitState(t, "pooljob", messages.StateSucceeded) // the pool's consumer exists
	b := f.browser(t)
	_, body, _ := b.get("/agents")
	require.Contains(t, body, ">Pause pool</button>")
	code, _, loc := b.post("/pools/default/pause", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/agents", loc)
	reply, err := f.client.PoolPause(ctx, "default") // idempotent: still paused, same time
	require.NoError(t, err)
	require.True(t, reply.Paused)

	_, body, _ = b.get("/agents")
	require.Contains(t, body, `<span class="badge warn"`)
	require.Contains(t, body, ">Resume pool</button>")
	code, _, _ = b.post("/pools/default/resume", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	_, body, _ = b.get("/agents")
	require.Contains(t, body, ">Pause pool</button>")
	code, _, _ = b.post("/pools/no.such/pause", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusBadRequest, code)
}
