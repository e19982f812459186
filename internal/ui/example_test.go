package ui_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/jetfleet/jetfleet/internal/ui"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// A dashboard for a fleet: a test fleet here; in production the
// connection's URL and credentials are the operator's.
func Example() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
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
