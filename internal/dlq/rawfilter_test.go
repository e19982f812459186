package dlq

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// rejectRaw never rejects an entry the text filter matches: skipping the
// decode changes no result.
func FuzzRejectRawAgreesWithMatch(f *testing.F) {
	f.Add("img-1", "connection <reset> by peer", "{\"path\": \"/a&b\"}", "attempt msg", "RESET")
	f.Add("<script>", "x", "1", "", "scr")
	f.Add("K", "\u212a\xff", "null", "é", "k")
	f.Fuzz(func(t *testing.T, item, errText, payload, attempt, text string) {
		raw, err := json.Marshal(payload)
		if err != nil {
			return
		}
		e := messages.DLQEntry{JobID: "j", ItemID: item, Error: errText, Payload: raw,
			Attempts: []messages.Attempt{{Message: attempt}}}
		body, err := json.Marshal(e)
		if err != nil {
			return
		}
		m := NewMatcher(messages.DLQFilter{Text: text})
		var back messages.DLQEntry
		decodeEntry("fleet.dlq.j", body, &back)
		if m.rejectRaw(body) && m.Match(&back) {
			t.Fatalf("rejected an entry that matches %q: %s", text, body)
		}
	})
}

func TestRejectRaw(t *testing.T) {
	e := messages.DLQEntry{JobID: "j", ItemID: "img-7", Error: "disk full", Payload: json.RawMessage(`{"a":1}`)}
	body, err := json.Marshal(e)
	require.NoError(t, err)
	require.True(t, NewMatcher(messages.DLQFilter{Text: "needle"}).rejectRaw(body))
	require.False(t, NewMatcher(messages.DLQFilter{Text: "DISK"}).rejectRaw(body))
	require.False(t, NewMatcher(messages.DLQFilter{Text: "a<b"}).rejectRaw(body), "not plain: decoded")
	require.False(t, NewMatcher(messages.DLQFilter{}).rejectRaw(body), "no text filter")
	require.False(t, NewMatcher(messages.DLQFilter{Text: "needle"}).rejectRaw([]byte(`garbage`)), "not an entry: decoded, listed as undecodable")
	old := []byte(`{"job_id":"j","item_id":"img-7","error":"disk full"}`) // before v0.4.0: no "v"
	require.True(t, NewMatcher(messages.DLQFilter{Text: "needle"}).rejectRaw(old))
	require.False(t, NewMatcher(messages.DLQFilter{Text: "disk"}).rejectRaw(old))
	require.False(t, NewMatcher(messages.DLQFilter{Text: "needle"}).rejectRaw([]byte(`{"v":x,"job_id":"j"}`)), "not as jetfleet writes: decoded")
}
