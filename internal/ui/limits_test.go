package ui

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The limits page shows each limit's configured and current rate, its
// AIMD factor, the slots in flight and the agents holding and waiting
// for them: named limits first, then the inline ones by key.
func TestLimitsPage(t *testing.T) {
	f := startFleet(t, Config{})
	b := f.browser(t)
	code, body, _ := b.get("/limits")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No limits yet")
	require.Contains(t, body, `href="/limits" aria-current="page"`)

	ctx := t.Context()
	js, err := jetstream.New(f.srv.Connect(t))
	require.NoError(t, err)
	var kv jetstream.KeyValue
	fleettest.WaitFor(t, 20*time.Second, func() error { // provisioned by the coordinator
		kv, err = js.KeyValue(ctx, messages.MustNames("").LimitsBucket())
		return err
	})
	store, err := limit.NewStore(js, kv, nil, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(store.Close)
	_, err = store.Set(ctx, "api", messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6, Adaptive: true})
	require.NoError(t, err)
	_, err = store.Set(ctx, "db", messages.LimitConfig{Concurrency: 2, Pool: "batch"})
	require.NoError(t, err)
	// One call holds a slot of api and fails as overload: the rate is cut
	// to half; another agent is refused a slot of db.
	lease := time.Minute
	g, _, err := store.Take(ctx, limit.NamedKey("api"), "", nil, limit.Request{Agent: "agent-0", Tokens: 1, Slot: true, Lease: lease})
	require.NoError(t, err)
	require.True(t, g.Slot)
	_, _, err = store.Take(ctx, limit.NamedKey("api"), "", nil, limit.Request{Agent: "agent-1", Tokens: 1, Slot: true, Lease: lease})
	require.NoError(t, err)
	require.NoError(t, store.Release(ctx, limit.NamedKey("api"), "agent-1", 1, limit.Overload, lease))
	for _, a := range []string{"agent-0", "agent-1", "agent-2"} {
		_, _, err = store.Take(ctx, limit.NamedKey("db"), "", nil, limit.Request{Agent: a, Tokens: 1, Slot: true, Lease: lease})
		require.NoError(t, err)
	}
	inline := messages.LimitConfig{Rate: 10, Burst: 2}
	_, _, err = store.Take(ctx, limit.InlineKey("t:<red>"), "", &inline, limit.Request{Agent: "agent-0", Tokens: 1})
	require.NoError(t, err)

	code, body, _ = b.get("/limits")
	require.Equal(t, http.StatusOK, code)
	rows := regexp.MustCompile(`(?s)<tr data-limit="([^"]*)">(.*?)</tr>`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 3, body)
	require.Equal(t, []string{"api", "db", "t:&lt;red&gt;"}, []string{rows[0][1], rows[1][1], rows[2][1]}, "named first, the inline key escaped")
	cells := func(row string) string { // the row's text, spaces folded
		txt := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(row, " ")
		return strings.Join(strings.Fields(txt), " ")
	}
	api, db, red := cells(rows[0][2]), cells(rows[1][2]), cells(rows[2][2])
	for _, want := range []string{"api adaptive", "any", "40/s burst 10", "20/s", "0.50", "1/6", "1 / 0"} {
		require.Contains(t, api, want, "api row: %s", api)
	}
	require.Contains(t, rows[0][2], `<progress max="6" value="1">`)
	require.Contains(t, rows[0][2], `badge warn`, "a cut rate stands out")
	for _, want := range []string{"db", "batch", "none", "2/2", "2 / 1"} {
		require.Contains(t, db, want, "db row: %s", db)
	}
	for _, want := range []string{"inline", "10/s burst 2", "1.00", "no cap"} {
		require.Contains(t, red, want, "inline row: %s", red)
	}
	require.NotContains(t, body, "<red>", "keys are escaped")

}
