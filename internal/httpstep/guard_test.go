package httpstep

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/retry"
)

func TestHTTPGuard(t *testing.T) {
	allow := func(list ...string) []netip.Prefix {
		p, err := ParseAllow(list)
		require.NoError(t, err)
		return p
	}
	for _, tc := range []struct {
		name  string
		allow []netip.Prefix
		addr  string
		ok    bool
	}{
		{"loopback", nil, "127.0.0.1:80", false},
		{"loopback v6", nil, "[::1]:80", false},
		{"v4 in v6 loopback", nil, "[::ffff:127.0.0.1]:80", false},
		{"cloud metadata (link-local)", nil, "169.254.169.254:80", false},
		{"link-local v6", nil, "[fe80::1]:80", false},
		{"unspecified", nil, "0.0.0.0:80", false},
		{"private network", nil, "10.1.2.3:443", true},
		{"public", nil, "93.184.216.34:443", true},
		{"listed network", allow("10.0.0.0/8"), "10.1.2.3:443", true},
		{"not listed", allow("10.0.0.0/8"), "93.184.216.34:443", false},
		{"loopback not listed", allow("10.0.0.0/8"), "127.0.0.1:80", false},
		{"loopback listed", allow("127.0.0.1"), "127.0.0.1:80", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&Guard{allow: tc.allow}).check(tc.addr)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrAddressRefused)
			}
		})
	}
	_, err := ParseAllow([]string{"10.0.0.0/8", "example.com"})
	require.ErrorContains(t, err, `http_allow[1]: "example.com" is not an IP address or a CIDR network`)

	// The agent's NATS servers, by the connection's URLs.
	srv := fleettest.RunServer(t)
	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	g := &Guard{nc: srv.Conn()}
	require.True(t, g.natsServer(netip.AddrPortFrom(netip.MustParseAddr(u.Hostname()), uint16(port))))
	require.False(t, g.natsServer(netip.MustParseAddrPort("10.9.9.9:4222")))
}

// An agent's http step reaches no loopback address unless its allow-list
// names it: the NATS monitoring port's /varz, or any local service, stays
// out of a step's reach. The refusal is permanent (not retried) and
// nothing reaches the server.
func TestHTTPStepRefusesLoopback(t *testing.T) {
	var calls atomic.Int32
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"server_id": "secret"}`))
	}))
	defer local.Close()
	call := &Call{JobID: "j", ItemID: "i", Attempt: 1, Item: json.RawMessage(`{}`), With: map[string]any{"url": local.URL + "/varz"}}

	a := agentStep(t)
	_, err := a.httpStep(context.Background(), call)
	require.ErrorIs(t, err, ErrAddressRefused)
	require.True(t, retry.IsPermanent(err), "%v", err)
	require.Zero(t, calls.Load(), "the local server was called")

	allowed := agentStep(t, "127.0.0.0/8")
	out, err := allowed.httpStep(context.Background(), call)
	require.NoError(t, err)
	require.Equal(t, `{"server_id": "secret"}`, out)
	require.False(t, errors.Is(err, ErrAddressRefused))
}

// stepOf is an agent's http step: its calls go through the guard of the
// agent's allow-list.
type stepOf struct{ c *http.Client }

// agentStep is the http step of an agent with allow as its http_allow
// and no NATS connection.
func agentStep(t *testing.T, allow ...string) stepOf {
	t.Helper()
	p, err := ParseAllow(allow)
	require.NoError(t, err)
	return stepOf{NewGuard(p, nil).Client()}
}

func (s stepOf) httpStep(ctx context.Context, c *Call) (any, error) { return Do(ctx, s.c, c) }
