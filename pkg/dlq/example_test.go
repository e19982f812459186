package dlq_test

import (
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/dlq"
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
