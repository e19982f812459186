package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestUIServesUntilInterrupted(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord, err := coordinator.New(srv.Connect(t), coordinator.Config{Provision: coordinator.Provision{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}})
	require.NoError(t, err)
	coordDone := make(chan struct{})
	go func() { _ = coord.Run(ctx); close(coordDone) }()
	defer func() { cancel(); <-coordDone }()
	<-coord.Ready()

	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "NATS_URL" {
			return srv.URL()
		}
		return ""
	}}
	uiCtx, stopUI := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- runCLI(uiCtx, env, []string{"ui", "--listen", "127.0.0.1:0", "--read-only"}) }()
	var addr, token string
	fleettest.WaitFor(t, 10*time.Second, func() error {
		m := regexp.MustCompile(`dashboard \(read-only\): (http://\S+/)\?token=(\S+)`).FindStringSubmatch(out.String())
		if m == nil {
			return io.ErrUnexpectedEOF
		}
		addr, token = m[1], m[2]
		return nil
	})
	resp, err := http.Get(addr + "dlq")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no page without the printed token")
	req, err := http.NewRequest(http.MethodGet, addr+"dlq", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "No dead letters")
	stopUI()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errb.String())
	case <-time.After(20 * time.Second):
		t.Fatal("fleetctl ui did not stop")
	}
}

func TestUIRefusesARemoteAddressUnlessAllowed(t *testing.T) {
	t.Parallel()
	code, _, errOut := cli(t, "nats://127.0.0.1:1", "ui", "--listen", "0.0.0.0:8080")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--allow-remote")
	code, _, _ = cli(t, "nats://127.0.0.1:1", "ui", "extra")
	require.Equal(t, exitUsage, code)
	code, _, errOut = cli(t, "nats://127.0.0.1:1", "ui", "--token", "short")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--token")
}
