package wire

import (
	"encoding/json"
	"errors"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A message of the results stream holds one Result (a JSON object), or a
// batch of them (a JSON array of Result objects): agents send the results
// of one job that finish close together in one message, so that the server
// stores, delivers and acknowledges one message for many items. Batches
// come from agents only; the coordinator's own results (the DLQ mover's,
// replays' reopen markers) are single objects. Every reader of the stream
// goes through DecodeResults.

// errNotResults is returned for a results message that is neither a JSON
// object nor a JSON array.
var errNotResults = errors.New("messages: a results message is a JSON object or an array of them")

// DecodeResults decodes a results message, a single Result or a batch,
// appending to into[:0] (whose elements are zeroed first, so that a field
// one result omits never keeps another's value) and returning the slice.
func DecodeResults(data []byte, into []messages.Result) ([]messages.Result, error) {
	clear(into[:cap(into)])
	into = into[:0]
	data = trimJSONSpace(data)
	if len(data) == 0 || (data[0] != '{' && data[0] != '[') {
		return into, errNotResults
	}
	if fast, err := decodeResultsFast(data, into); err == nil {
		return fast, nil
	}
	clear(into[:cap(into)])
	if data[0] == '{' {
		into = append(into[:0], messages.Result{})
		if err := json.Unmarshal(data, &into[0]); err != nil {
			return into[:0], err
		}
		return into, nil
	}
	into = into[:0]
	if err := json.Unmarshal(data, &into); err != nil {
		return into[:0], err
	}
	return into, nil
}

// ResultBatch builds a results message of several results, each already
// encoded (EncodeResult), within a size limit. The zero value is empty;
// it is not safe for concurrent use.
type ResultBatch struct {
	buf []byte // "[" then the results, comma-separated; no closing bracket
	n   int
}

// Len is the number of results in the batch.
func (b *ResultBatch) Len() int { return b.n }

// Fits reports whether a result of size bytes can join the batch without
// its message growing over max bytes. An empty batch takes any result.
func (b *ResultBatch) Fits(size, max int) bool {
	return b.n == 0 || len(b.buf)+1+size+1 <= max
}

// Add appends an encoded result.
func (b *ResultBatch) Add(encoded []byte) {
	if b.n == 0 {
		b.buf = append(b.buf[:0], '[')
	} else {
		b.buf = append(b.buf, ',')
	}
	b.buf = append(b.buf, encoded...)
	b.n++
}

// Payload is the batch's message: the result itself when it holds one
// (what a reader that predates batches understands), else a JSON array.
// The batch must not be used after Payload.
func (b *ResultBatch) Payload() []byte {
	if b.n == 1 {
		return b.buf[1:]
	}
	return append(b.buf, ']')
}
