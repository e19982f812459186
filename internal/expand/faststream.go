package expand

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// fastStream yields the elements of the array selected by a streamable
// json_path, like streamIter, at a fraction of its cost: it scans its own
// buffer with jsonscan instead of encoding/json's decoder, which scans
// every element twice and allocates per token. It is the path every valid
// input takes; the coordinator reads an input twice per job (to count,
// then to publish), and that reading was the largest part of its CPU.
//
// fastStream explains nothing. At anything unusual — a syntax error, a
// missing or repeated field, a key written with escapes, nesting deeper
// than jsonscan.MaxNesting, a skipped value larger than fastSkipLimit, a
// read error — it hands over to a streamIter at the same element, which
// reports exactly what it always reported (or, for a legitimate oddity
// such as an escaped key, carries on). Before any byte was discarded the
// streamIter reads the bytes already read and then the rest; after, the
// input is opened again and the elements already yielded are skipped.
//
// A fastStream is not safe for concurrent use.
type fastStream struct {
	ref    string
	q      *query
	reopen func() (io.ReadCloser, error)
	rc     io.ReadCloser

	buf  []byte // buf[r:w] is read and not consumed
	r, w int
	eof  bool // rc is exhausted (or failed: the fallback finds out)
	// kept: buf[:w] is every byte read so far (nothing discarded yet).
	kept bool

	n     int64 // elements yielded
	first bool  // the next element is the array's first
	done  bool

	slow *streamIter // non-nil once handed over
}

const (
	// fastReadSize is the read size; the buffer grows past it to hold a
	// larger element.
	fastReadSize = 64 << 10
	// fastSkipLimit bounds the buffer while skipping values that are not
	// on the path (before and after the array): past it, streamIter skips
	// them token by token without holding them.
	fastSkipLimit = 1 << 20
)

// newFastStream reads rc up to the start of the selected array. Errors
// (including a path that is not there) are the ones newStreamIter returns.
func newFastStream(ref string, q *query, rc io.ReadCloser, reopen func() (io.ReadCloser, error)) (*fastStream, error) {
	f := &fastStream{ref: ref, q: q, reopen: reopen, rc: rc, buf: make([]byte, fastReadSize), kept: true, first: true}
	for {
		i, st := f.descend()
		switch {
		case st == jsonscan.OK:
			f.r = i
			return f, nil
		case st == jsonscan.More && !f.eof && f.w < fastSkipLimit:
			f.fill()
		default:
			if err := f.handOver(); err != nil {
				return nil, err
			}
			return f, nil
		}
	}
}

// descend scans from the start of the buffer to just past the '[' of the
// selected array.
func (f *fastStream) descend() (int, jsonscan.Status) {
	b := f.buf[:f.w]
	i := jsonscan.SkipSpace(b, 0)
	for _, name := range f.q.names {
		if i >= len(b) {
			return i, jsonscan.More
		}
		if b[i] != '{' {
			return i, jsonscan.Bad
		}
		i = jsonscan.SkipSpace(b, i+1)
		for {
			if i >= len(b) {
				return i, jsonscan.More
			}
			if b[i] != '"' {
				return i, jsonscan.Bad // '}': no such field (or malformed)
			}
			key := i + 1
			var st jsonscan.Status
			if i, st = jsonscan.Key(b, i); st != jsonscan.OK {
				return i, st
			}
			match, ok := keyIs(b[key:], name)
			if !ok {
				return i, jsonscan.Bad
			}
			if match {
				break
			}
			if i, st = jsonscan.Value(b, i); st != jsonscan.OK {
				return i, st
			}
			i = jsonscan.SkipSpace(b, i)
			if i >= len(b) {
				return i, jsonscan.More
			}
			if b[i] != ',' {
				return i, jsonscan.Bad
			}
			i = jsonscan.SkipSpace(b, i+1)
		}
	}
	if i >= len(b) {
		return i, jsonscan.More
	}
	if b[i] != '[' {
		return i, jsonscan.Bad
	}
	return i + 1, jsonscan.OK
}

// keyIs reports whether the key starting at b[0] (after its opening quote)
// is name; ok is false when it is written with escapes, which only
// encoding/json decodes here.
func keyIs(b []byte, name string) (match, ok bool) {
	end := bytes.IndexByte(b, '"')
	if bytes.IndexByte(b[:end], '\\') >= 0 {
		return false, false
	}
	return string(b[:end]) == name, true
}

// fill reads more input into the buffer, moving unconsumed bytes to its
// start (once nothing needs keeping) and at least doubling the room when
// the unconsumed bytes fill it, so that rescanning a value that spans
// reads costs linear time.
func (f *fastStream) fill() {
	if !f.kept && f.r > 0 {
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	if f.w == len(f.buf) || len(f.buf)-f.w < (f.w-f.r) {
		grown := make([]byte, max(2*len(f.buf), f.w+fastReadSize))
		copy(grown, f.buf[:f.w])
		f.buf = grown
	}
	for f.w < len(f.buf) {
		n, err := f.rc.Read(f.buf[f.w:])
		f.w += n
		if err != nil {
			f.eof = true
			return
		}
		if n > 0 {
			return
		}
	}
}

// next returns the next element, or io.EOF after the last once the rest
// of the document has been checked.
func (f *fastStream) next() (json.RawMessage, error) {
	if f.slow != nil {
		return f.slow.next()
	}
	if f.done {
		return nil, io.EOF
	}
	for {
		start, end, st := f.element()
		switch {
		case st == jsonscan.OK && start < 0: // the closing ']'
			f.r = end
			return f.finish()
		case st == jsonscan.OK:
			f.r, f.first = end, false
			f.n++
			return bytes.Clone(f.buf[start:end]), nil
		case st == jsonscan.More && !f.eof:
			f.kept = false
			f.fill()
		default:
			if err := f.handOver(); err != nil {
				return nil, err
			}
			return f.slow.next()
		}
	}
}

// element scans the next element from f.r: its span, or start < 0 and end
// just past the array's closing ']'.
func (f *fastStream) element() (start, end int, st jsonscan.Status) {
	b := f.buf[:f.w]
	i := jsonscan.SkipSpace(b, f.r)
	if i >= len(b) {
		return 0, i, jsonscan.More
	}
	if b[i] == ']' {
		return -1, i + 1, jsonscan.OK
	}
	if !f.first {
		if b[i] != ',' {
			return 0, i, jsonscan.Bad
		}
		if i = jsonscan.SkipSpace(b, i+1); i >= len(b) {
			return 0, i, jsonscan.More
		}
	}
	end, st = jsonscan.Value(b, i)
	return i, end, st
}

// finish checks the rest of the document after the array: the fields
// after it in each enclosing object (none may be the path's field again),
// the closing braces, and nothing but whitespace after them.
func (f *fastStream) finish() (json.RawMessage, error) {
	f.kept = false
	level := len(f.q.names) - 1 // the enclosing object being read; -1: after the document
	for {
		b := f.buf[:f.w]
		i := jsonscan.SkipSpace(b, f.r)
		st := jsonscan.OK
		switch {
		case i >= len(b) && level < 0:
			f.r = i // only whitespace so far
			if f.eof {
				f.done = true
				return nil, io.EOF
			}
			st = jsonscan.More
		case i >= len(b):
			st = jsonscan.More
		case level < 0: // data after the document
			st = jsonscan.Bad
		case b[i] == '}':
			f.r = i + 1
			level--
			continue
		case b[i] == ',':
			i = jsonscan.SkipSpace(b, i+1)
			if i >= len(b) {
				st = jsonscan.More
				break
			}
			key := i + 1
			if i, st = jsonscan.Key(b, i); st != jsonscan.OK {
				break
			}
			if match, ok := keyIs(b[key:], f.q.names[level]); match || !ok {
				st = jsonscan.Bad
				break
			}
			if i, st = jsonscan.Value(b, i); st == jsonscan.OK {
				f.r = i
				continue
			}
		default:
			st = jsonscan.Bad
		}
		if st == jsonscan.More && !f.eof && f.w-f.r < fastSkipLimit {
			f.fill()
			continue
		}
		if err := f.handOver(); err != nil {
			return nil, err
		}
		return f.slow.next()
	}
}

// handOver replaces the fast path by a streamIter at the same element.
// Whatever input it opens becomes f.rc, which close (or, for an error in
// newFastStream, the caller) closes.
func (f *fastStream) handOver() error {
	if f.kept {
		f.rc = readCloser{io.MultiReader(bytes.NewReader(f.buf[:f.w]), f.rc), f.rc}
	} else {
		f.rc.Close()
		f.rc = io.NopCloser(nil) // closed already
		rc, err := f.reopen()
		if err != nil {
			return err
		}
		f.rc = rc
	}
	f.buf = nil
	slow, err := newStreamIter(f.ref, f.q, f.rc)
	if err != nil {
		return err
	}
	for k := int64(0); k < f.n; k++ {
		if _, err := slow.next(); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("input %s: the input changed while it was read", f.ref)
			}
			return err
		}
	}
	f.slow = slow
	return nil
}

// close closes the input being read.
func (f *fastStream) close() error { return f.rc.Close() }

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
