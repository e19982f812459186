package kvstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/internal/kvstate"
)

// slots is a named concurrency limit shared by a fleet: how many slots are
// held of Max, and the ids of the last writes (to settle lost replies).
type slots struct {
	Held    int      `json:"held"`
	Max     int      `json:"max"`
	Writers []string `json:"writers,omitempty"`
}

var errNoSuchLimit = errors.New("no such limit")

// take takes a slot unless all are held: one decision, applied by
// compare-and-set, decided again on a conflict.
func take(cur kvstate.Entry[slots], id string) (slots, bool, error) {
	v := cur.Value
	if !cur.Exists {
		return v, false, errNoSuchLimit
	}
	if v.Held >= v.Max {
		return v, false, nil // all held: nothing written
	}
	v.Held++
	v.Writers = append(slices.Clone(v.Writers[max(0, len(v.Writers)-7):]), id)
	return v, true, nil
}

// A concurrency limit of two slots, taken three times: the third finds
// them held and writes nothing.
func Example() {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "limits"})
	if err != nil {
		fmt.Println(err)
		return
	}

	limits, err := kvstate.New(kvstate.Config[slots]{
		KV:        kv,
		JetStream: js,   // reads from the stream leader
		Watch:     true, // other processes' writes reach the cache
		WrittenBy: func(v slots, id string) bool { return slices.Contains(v.Writers, id) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limits.Close()

	if _, _, err := limits.Create(ctx, "db", slots{Max: 2}); err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		c, err := limits.Update(ctx, "db", take)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("taken: %v, held %d of %d\n", c.Written, c.To.Value.Held, c.To.Value.Max)
	}
	_, err = limits.Update(ctx, "cache", take)
	fmt.Println(errors.Is(err, errNoSuchLimit))
	// Output:
	// taken: true, held 1 of 2
	// taken: true, held 2 of 2
	// taken: false, held 2 of 2
	// true
}
