package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// The coordinator serves the dashboard with --ui-addr, to requests that
// carry its --ui-token (FLEET_UI_TOKEN) only.
func TestCoordinatorServesTheDashboard(t *testing.T) {
	ui := fmt.Sprintf("127.0.0.1:%d", fleettest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const token = "a-token-of-our-own-0123"
	args := []string{"--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--ui-addr", ui, "--ui-read-only", "--ui-token", token, "--log-level", "error"}
	go func() { done <- run(ctx, args, noEnv) }()
	fleettest.WaitFor(t, 20*time.Second, func() error {
		resp, err := http.Get("http://" + ui + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("status %d without the token", resp.StatusCode)
		}
		req, err := http.NewRequest(http.MethodGet, "http://"+ui+"/", nil)
		if err != nil {
			return err
		}
		req.SetBasicAuth("me", token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("coordinator did not stop")
	}
}

func TestCoordinatorRefusesARemoteDashboard(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--ui-addr", "0.0.0.0:8080", "--log-level", "error"}, noEnv)
	require.ErrorContains(t, err, "--ui-allow-remote")
}
