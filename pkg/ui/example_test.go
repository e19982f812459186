package ui_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/ui"
)

// A dashboard for a fleet: an embedded JetStream server and a coordinator
// here; in production the connection's URL and credentials are the
// operator's.
func Example() {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord, err := coordinator.New(nc, coordinator.Config{})
	if err != nil {
		panic(err)
	}
	go func() { _ = coord.Run(ctx) }()
	<-coord.Ready()

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
