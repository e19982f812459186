package fleettest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// A test that needs JetStream starts its own embedded server. In a real
// test, t comes from the test function; here a throwaway testing.T-like
// value stands in so the example runs.
func ExampleRunServer() {
	t := &exampleT{}
	defer t.cleanup()

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
