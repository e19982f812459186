package fleettest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// A test that needs JetStream starts its own embedded server.
func ExampleRunServer() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()

	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	kv, err := srv.JS().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "settings"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := kv.PutString(ctx, "color", "blue"); err != nil {
		fmt.Println(err)
		return
	}
	e, err := kv.Get(ctx, "color")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s = %s (revision %d)\n", e.Key(), e.Value(), e.Revision())
	// Output: color = blue (revision 1)
}

// A runnable example has no *testing.T: an ExampleTB stands in for it,
// and Close runs what the helpers registered with Cleanup.
func ExampleNewExampleTB() {
	t := fleettest.NewExampleTB()
	t.Cleanup(func() { fmt.Println("server stopped") })
	fmt.Println(t.Name(), "running")
	t.Close()
	// Output:
	// Example running
	// server stopped
}
