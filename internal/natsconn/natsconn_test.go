package natsconn_test

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/auth/authtest"
	"github.com/jetfleet/jetfleet/internal/natsconn"
)

// A server configured with what `fleetctl auth init --tls` writes: clients
// get in with --nkey and --tls-ca, not without the CA, and a refused
// publish reaches OnAsyncError.
func TestConnectWithNKeyAndTLS(t *testing.T) {
	srv, res := authtest.RunServer(t, auth.Options{TLS: true, TLSHosts: []string{"127.0.0.1", "localhost"}})
	ca := filepath.Join(res.Dir, auth.CAFile)
	_, err := srv.Conn().TLSConnectionState()
	require.NoError(t, err, "tls.conf turns TLS on")

	// Flags and environment, as every binary registers them.
	var o natsconn.Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	env := map[string]string{"NATS_URL": srv.URL(), "NATS_NKEY": res.Seeds["submitter"], "NATS_TLS_CA": ca}
	o.Register(fs, func(k string) string { return env[k] })
	require.NoError(t, fs.Parse(nil))
	refused := make(chan error, 1)
	o.OnAsyncError = func(err error) {
		if natsconn.IsPermissionViolation(err) {
			select {
			case refused <- err:
			default:
			}
		}
	}
	nc, err := o.Connect("")
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.TLSConnectionState()
	require.NoError(t, err, "the connection is TLS")
	require.NoError(t, nc.Publish("fleet.work.default.x", nil))
	select {
	case err := <-refused:
		require.Contains(t, err.Error(), `"fleet.work.default.x"`)
		subject, ok := natsconn.DeniedPublish(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, "fleet.work.default.x", subject)
	case <-time.After(3 * time.Second):
		t.Fatal("no permissions violation reported")
	}

	// Without the CA, the server's certificate is not trusted.
	noCA := natsconn.Options{URL: srv.URL(), NKey: res.Seeds["submitter"]}
	_, err = noCA.Connect("")
	require.Error(t, err)
	// Without an nkey, no entry.
	noKey := natsconn.Options{URL: srv.URL(), TLSCA: ca}
	_, err = noKey.Connect("")
	require.ErrorIs(t, err, nats.ErrAuthorization)
}

func TestDeniedPublish(t *testing.T) {
	// As nats.go wraps the server's -ERR (nats.go processErr), and as
	// Options.OnAsyncError adds the subscription.
	violation := func(text string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text) }
	for _, tc := range []struct {
		err     error
		subject string
		ok      bool
	}{
		{violation(`Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.FLEET_WORK.agents-p.fleet.work.p.>"`), "$JS.API.CONSUMER.CREATE.FLEET_WORK.agents-p.fleet.work.p.>", true},
		{fmt.Errorf("%w (subscription %q)", violation(`Permissions Violation for Publish to "a.\"b"`), "_INBOX.x"), `a."b`, true},
		{violation(`Permissions Violation for Subscription to "fleet.work.>"`), "", false},
		{violation(`Permissions Violation for Publish to "unterminated`), "", false},
		{errors.New(`Permissions Violation for Publish to "x"`), "", false}, // not a violation nats.go reported
		{nil, "", false},
	} {
		subject, ok := natsconn.DeniedPublish(tc.err)
		require.Equal(t, tc.ok, ok, "%v", tc.err)
		require.Equal(t, tc.subject, subject, "%v", tc.err)
	}
}
