package ui_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/internal/ui"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// A dashboard for a fleet: a test fleet here; in production the
// connection's URL and credentials are the operator's.
func Example() {
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.cleanup()
	fleet := fleettest.RunFleet(t, nil) // a server, a coordinator and an agent
	nc := fleet.Server.Conn()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dash, err := ui.New(nc, ui.Config{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = dash.Serve(ctx, ln) }()

	// Every request carries the access token: here as a bearer token; a
	// browser opens dash.LoginURL(base) once and gets a login cookie.
	req, err := http.NewRequest(http.MethodGet, "http://"+dash.Addr().String()+"/", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+dash.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "No jobs"), resp.Header.Get("X-Frame-Options"))
	// Output: 200 true DENY
}

// exampleT is the smallest testing.TB for a runnable example: it collects
// cleanups and panics on failure.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                   {}
func (t *exampleT) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (t *exampleT) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (t *exampleT) Logf(string, ...any)       {}
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "fleettest-example-")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
