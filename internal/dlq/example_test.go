package dlq_test

import (
	"fmt"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Entries are de-duplicated per job, item and generation: an agent that
// crashes after publishing and publishes again leaves one entry, while a
// replayed item (a new generation) can be dead-lettered again.
func ExampleEntryMsgID() {
	fmt.Println(dlq.EntryMsgID("nightly", "img/01.jpg", 0))
	fmt.Println(dlq.EntryMsgID("nightly", "img/01.jpg", 1))
	// Output:
	// dlq/nightly/aW1nLzAxLmpwZw/0
	// dlq/nightly/aW1nLzAxLmpwZw/1
}

// A replay republishes generation+1 of an item under a fresh work msg id,
// after a reopen marker whose id is just as stable: an interrupted replay
// run again produces the same ids, and the server drops the duplicates.
func ExampleReopenMsgID() {
	fmt.Println(dlq.ReopenMsgID("nightly", "img/01.jpg", 1))
	fmt.Println(wire.WorkMsgID("nightly", "img/01.jpg", 1))
	// Output:
	// reopen/nightly/aW1nLzAxLmpwZw/1
	// nightly/aW1nLzAxLmpwZw/1
}

// One matcher decides what list, stats, export, purge and replay select.
func ExampleNewMatcher() {
	e := &messages.DLQEntry{
		JobID: "nightly", ItemID: "img/01.jpg", Reason: messages.ReasonAttempts,
		ErrorClass: "network", Signature: "3fa2b1c4d5e6f708", Error: "dial tcp 10.0.0.7:443: connection refused",
	}
	for _, f := range []messages.DLQFilter{
		{JobID: "nightly", ErrorClass: "network"},
		{Signature: "3fa2"}, // a prefix will do
		{Text: "CONNECTION REFUSED"},
		{Reason: messages.ReasonMaxDeliveries},
	} {
		fmt.Println(dlq.NewMatcher(f).Match(e))
	}
	// Output:
	// true
	// true
	// true
	// false
}
