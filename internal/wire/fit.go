package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The server refuses a message larger than its max_payload (1 MiB by
// default; nats.go reports nats.ErrMaxPayload before sending it). Every
// message jetfleet writes about an item carries the item's payload or id,
// which come from user data, so each one is encoded to fit a limit: what
// can be shortened (attempt histories, outputs, error texts) is, oldest
// and least useful first, and the message says what was left out. A
// message that cannot fit even then is refused with ErrTooLarge, which the
// coordinator prevents by checking every item when it accepts a job (see
// ItemHeadroom).

// ErrTooLarge is returned by the Encode functions when a message cannot be
// made to fit its limit.
var ErrTooLarge = errors.New("messages: message larger than the limit")

// ItemHeadroom is the room an item's work message must leave under the
// server's max_payload (the coordinator refuses items that would not): its
// dead-letter entry carries the payload and the id again, plus the
// signature, the reason, the error (at most MaxErrorBytes) and at least its
// latest attempt; its result carries the id with an output and an error.
const ItemHeadroom = 16 << 10

// MaxErrorBytes bounds an error text kept in an attempt, a result or an
// entry (its tail is kept: the end of an error says most).
const MaxErrorBytes = 2048

// shortTextBytes is what error texts are cut to when a message does not
// fit even without its history.
const shortTextBytes = 256

// EncodeDLQEntry encodes e as JSON in at most max bytes. When the entry is
// larger it drops, in order, until it fits: the oldest attempts (counted in
// AttemptsDropped; the newest is kept while anything else can go), the
// texts of errors beyond their last 256 bytes, every attempt, and the
// payload, replaced by a JSON string of its start (PayloadTruncated: such
// an entry cannot be replayed). e is not modified.
func EncodeDLQEntry(e *messages.DLQEntry, max int) ([]byte, error) {
	data, err := json.Marshal(e)
	if err != nil || len(data) <= max {
		return data, err
	}
	c := *e
	var drop int
	c.Attempts, drop = dropOldest(c.Attempts, len(data)-max, 1)
	c.AttemptsDropped += drop
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	c.Error, c.Attempts = tail(c.Error, shortTextBytes), shortMessages(c.Attempts)
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	c.AttemptsDropped += len(c.Attempts)
	c.Attempts = nil
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	// Last resort: the payload (an item the coordinator accepted always fits
	// before this; a poison message's raw body may not).
	c.Payload = nil
	data, err = json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	room := max - len(data) - len(`""`)
	if room < 0 {
		return nil, fmt.Errorf("%w: the dead-letter entry of item %s needs %d bytes without its payload, history and texts; the limit is %d", ErrTooLarge, ShortID(e.ItemID), len(data), max)
	}
	// A JSON string of the payload's start: every byte may take up to six
	// when escaped, so cut conservatively.
	c.Payload, _ = json.Marshal(head(string(e.Payload), room/6))
	c.PayloadTruncated = true
	return json.Marshal(&c)
}

// EncodeWorkItem encodes wi as JSON in at most max bytes, dropping the
// oldest attempts of its history (a replayed item's) until it fits. wi is
// not modified.
func EncodeWorkItem(wi *WorkItem, max int) ([]byte, error) {
	if data, ok := appendWorkItem(make([]byte, 0, len(wi.Payload)+256), wi); ok && len(data) <= max {
		return data, nil
	}
	data, err := json.Marshal(wi)
	if err != nil || len(data) <= max {
		return data, err
	}
	c := *wi
	var drop int
	c.History, drop = dropOldest(c.History, len(data)-max, 0)
	c.HistoryDropped += drop
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	c.HistoryDropped += len(c.History)
	c.History = nil
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	return nil, fmt.Errorf("%w: the work message of item %s is %d bytes without history; the limit is %d", ErrTooLarge, ShortID(wi.ItemID), len(data), max)
}

// EncodeItemState encodes st as JSON in at most max bytes. When the state
// is larger it drops, in order: the oldest attempts of its history
// (counted in HistoryDropped; the newest is kept), the outputs of finished
// steps but the last (only the last one is reported), the texts beyond
// their last 256 bytes, and the last output beyond its last 256 bytes. st
// is not modified.
func EncodeItemState(st *ItemState, max int) ([]byte, error) {
	// 512 bytes hold a state of a few attempts: one allocation.
	if data, ok := appendItemState(make([]byte, 0, 512), st); ok && len(data) <= max {
		return data, nil
	}
	data, err := json.Marshal(st)
	if err != nil || len(data) <= max {
		return data, err
	}
	c := *st
	var drop int
	c.History, drop = dropOldest(c.History, len(data)-max, 1)
	c.HistoryDropped += drop
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	if n := len(c.Outputs); n > 1 {
		// Earlier outputs become empty, so Outputs keeps one entry per step.
		outs := make([]string, n)
		outs[n-1] = c.Outputs[n-1]
		c.Outputs = outs
	}
	c.Error, c.History = tail(c.Error, shortTextBytes), shortMessages(c.History)
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	if n := len(c.Outputs); n > 0 {
		c.Outputs[n-1] = tail(c.Outputs[n-1], shortTextBytes)
	}
	if data, err = json.Marshal(&c); err != nil || len(data) <= max {
		return data, err
	}
	return nil, fmt.Errorf("%w: the retry state of item %s is %d bytes; the limit is %d", ErrTooLarge, ShortID(st.ItemID), len(data), max)
}

// EncodeResult encodes r as JSON in at most max bytes, keeping the tails
// of its output and error as long as they fit. r is not modified.
func EncodeResult(r *messages.Result, max int) ([]byte, error) {
	// 256 bytes hold a plain result: one allocation, not a growing slice.
	if data, ok := appendResult(make([]byte, 0, 256), r); ok && len(data) <= max {
		return data, nil
	}
	data, err := json.Marshal(r)
	if err != nil || len(data) <= max {
		return data, err
	}
	c := *r
	c.Output, c.Error = "", ""
	data, err = json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	room := (max - len(data)) / 6 // escaping may take six bytes per byte
	if room < 0 {
		return nil, fmt.Errorf("%w: the result of item %s is %d bytes without output and error; the limit is %d", ErrTooLarge, ShortID(r.ItemID), len(data), max)
	}
	c.Error = tail(r.Error, min(len(r.Error), room/2))
	c.Output = tail(r.Output, room-len(c.Error))
	return json.Marshal(&c)
}

// dropOldest drops the oldest attempts until their encoded sizes add up to
// at least over bytes, keeping at least keep of them; it returns what is
// left and how many it dropped.
func dropOldest(as []messages.Attempt, over, keep int) ([]messages.Attempt, int) {
	drop := 0
	for drop < len(as)-keep && over > 0 {
		over -= attemptSize(&as[drop]) + 1
		drop++
	}
	return as[drop:], drop
}

// shortMessages returns a copy of as with every message cut to its last
// shortTextBytes bytes.
func shortMessages(as []messages.Attempt) []messages.Attempt {
	out := append([]messages.Attempt(nil), as...)
	for i := range out {
		out[i].Message = tail(out[i].Message, shortTextBytes)
	}
	return out
}

// attemptSize is the encoded size of a history attempt.
func attemptSize(a *messages.Attempt) int {
	b, err := json.Marshal(a)
	if err != nil {
		return 0
	}
	return len(b)
}

// tail returns at most the last n bytes of s, starting on a rune boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// Clip returns at most the first n bytes of s, cut on a rune boundary.
func Clip(s string, n int) string { return head(s, n) }

// head returns at most the first n bytes of s, ending on a rune boundary.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// shortIDBytes is how much of a long item id ShortID shows.
const shortIDBytes = 64

// ShortID quotes an item id for error messages and logs: whole when it is
// short, else its first 64 bytes, an ellipsis and its length. (Messages
// about an item must stay small whatever its id; the id itself is never
// shortened where it identifies the item.)
func ShortID(id string) string {
	if len(id) <= shortIDBytes {
		return fmt.Sprintf("%q", id)
	}
	return fmt.Sprintf("%q… (%d bytes)", head(id, shortIDBytes), len(id))
}
