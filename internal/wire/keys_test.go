package wire

import (
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestItemKeyBounded(t *testing.T) {
	for _, id := range []string{"img/01.jpg", "a.b*>\x00 \xff", strings.Repeat("x", 96), strings.Repeat("x", 97), strings.Repeat("x", 5000), strings.Repeat("é", 1<<19)} {
		key := ItemKey(strings.Repeat("p", messages.MaxTokenLen), strings.Repeat("j", messages.MaxTokenLen), id)
		if len(key) > 2*messages.MaxTokenLen+2+messages.MaxEncodedItemID {
			t.Fatalf("key of an id of %d bytes is %d bytes", len(id), len(key))
		}
	}
}

func TestWorkMsgID(t *testing.T) {
	long := strings.Repeat("x", 200)
	if got := WorkMsgID("job", long, 3); got != "job/"+messages.EncodeItemID(long)+"/3" {
		t.Fatalf("WorkMsgID = %q", got)
	}
}
