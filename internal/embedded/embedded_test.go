package embedded_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/embedded"
)

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true,
		"0.0.0.0": false, "": false, "::": false, "10.0.0.5": false, "nats.example": false,
	} {
		require.Equal(t, want, embedded.IsLoopback(host), host)
	}
}

// Without users the embedded server stays on this machine: listening on
// every interface (or any other address) is refused with the way out.
func TestStartRefusesAnOpenServerBeyondLoopback(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "::", ""} {
		srv, err := embedded.Start(embedded.Options{Host: host})
		if host == "" {
			// "" means the default, 127.0.0.1.
			require.NoError(t, err)
			srv.Shutdown()
			continue
		}
		require.ErrorIs(t, err, embedded.ErrInsecureListen, host)
		require.Contains(t, err.Error(), "--auth-dir")
		require.Nil(t, srv)
	}
	srv, err := embedded.Start(embedded.Options{Host: "127.0.0.1"})
	require.NoError(t, err)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err, "on loopback anyone may connect")
	nc.Close()
}

// With --auth-dir the server listens on every interface and admits only
// the generated users, over TLS, each with its role's permissions.
func TestStartWithAuthDirAdmitsOnlyTheUsers(t *testing.T) {
	dir := t.TempDir()
	res, err := auth.Init(auth.Options{Dir: dir, TLS: true, Pools: []string{"default"}})
	require.NoError(t, err)
	srv, err := embedded.Start(embedded.Options{Host: "0.0.0.0", AuthDir: dir})
	require.NoError(t, err)
	defer srv.Shutdown()
	url := srv.URL()
	require.True(t, strings.HasPrefix(url, "tls://127.0.0.1:"), url)
	ca := nats.RootCAs(filepath.Join(dir, auth.CAFile))

	_, err = nats.Connect(url, ca)
	require.Error(t, err, "an anonymous client is refused")
	require.ErrorIs(t, err, nats.ErrAuthorization)
	_, err = nats.Connect(strings.Replace(url, "tls://", "nats://", 1))
	require.Error(t, err, "a client without TLS is refused")

	perm := make(chan error, 1)
	seed, err := nats.NkeyOptionFromSeed(res.Seeds[auth.AgentUser("default")])
	require.NoError(t, err)
	nc, err := nats.Connect(url, ca, seed, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case perm <- err:
		default:
		}
	}))
	require.NoError(t, err, "the agent user connects")
	defer nc.Close()
	require.NoError(t, nc.Publish("fleet.api.jobs.submit", []byte(`{}`)))
	select {
	case err := <-perm:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(5 * time.Second):
		t.Fatal("the agent was not refused the API")
	}
}
