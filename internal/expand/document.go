package expand

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// DefaultMaxDocumentBytes bounds the size of an input read whole for a
// json_path that cannot be streamed. See WithMaxDocumentBytes.
const DefaultMaxDocumentBytes = 64 << 20

// docIter evaluates a json_path that cannot be streamed (filters, recursive
// descent, slices, unions, indexes) on the whole input document, decoded in
// memory, and yields the selected nodes re-encoded as compact JSON.
type docIter struct {
	nodes []any
	i     int
	buf   bytes.Buffer
	enc   *json.Encoder
}

// newDocIter reads the whole document from rc (at most max bytes) and
// selects the nodes.
func newDocIter(ctx context.Context, ref string, q *query, rc io.ReadCloser, max, maxNodes int64) (*docIter, error) {
	defer rc.Close()
	lr := &limitReader{r: bufio.NewReaderSize(rc, readBufferSize), left: max}
	tr := &trackReader{r: lr}
	dec := json.NewDecoder(tr)
	dec.UseNumber() // numbers keep their text: ids like 12345678901234567890 survive
	var doc any
	if err := dec.Decode(&doc); err != nil {
		if lr.hit {
			return nil, errorf(ErrInputTooLarge,
				"input %s: json_path %s needs the whole input in memory and the input is larger than %d bytes; a path of the form $.a.b[*] is read one item at a time",
				ref, q.expr, max)
		}
		if err == io.EOF {
			return nil, &SyntaxError{Ref: ref, Offset: tr.n, Item: -1, Msg: "empty input: no JSON value"}
		}
		return nil, malformed(ref, tr, err, 0, sepNone, -1)
	}
	start := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, malformed(ref, tr, err, start, sepNone, -1)
		}
		off := start
		if b, ok := tr.since(start); ok {
			off += int64(jsonscan.SkipSpace(b, 0))
		}
		return nil, &SyntaxError{Ref: ref, Offset: off, Item: -1, Msg: "unexpected data after the end of the JSON document"}
	}
	nodes, err := selectBounded(ctx, q, doc, maxNodes)
	if err != nil {
		return nil, err
	}
	it := &docIter{nodes: nodes}
	it.enc = json.NewEncoder(&it.buf)
	it.enc.SetEscapeHTML(false)
	return it, nil
}

func (it *docIter) next() (json.RawMessage, error) {
	if it.i >= len(it.nodes) {
		it.nodes = nil
		return nil, io.EOF
	}
	node := it.nodes[it.i]
	it.nodes[it.i] = nil // let the node go once it is encoded
	it.i++
	it.buf.Reset()
	if err := it.enc.Encode(node); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimRight(it.buf.Bytes(), "\n")), nil
}

func (it *docIter) close() error { it.nodes = nil; return nil }

// limitReader fails with ErrInputTooLarge once more than left bytes are
// read, and records that it did.
type limitReader struct {
	r    io.Reader
	left int64
	hit  bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Probe one byte: an input of exactly the limit is fine.
		var b [1]byte
		n, err := l.r.Read(b[:])
		if n > 0 {
			l.hit = true
			return 0, ErrInputTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
