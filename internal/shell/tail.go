package shell

import (
	"io"
	"sync"
	"unicode/utf8"
)

// tailWriter keeps the last max bytes written to it in a fixed ring, so a
// process printing gigabytes costs max bytes of memory. It is safe for
// concurrent use.
type tailWriter struct {
	mu    sync.Mutex
	buf   []byte // len(buf) == max once allocated
	max   int
	pos   int  // next write position in buf
	full  bool // buf has wrapped at least once
	total int64
}

func newTailWriter(max int) *tailWriter { return &tailWriter{max: max} }

// Write never fails and always consumes all of p.
func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	w.total += int64(n)
	if w.max <= 0 {
		return n, nil
	}
	if w.buf == nil {
		w.buf = make([]byte, w.max)
	}
	if len(p) >= w.max {
		copy(w.buf, p[len(p)-w.max:])
		w.pos, w.full = 0, true
		return n, nil
	}
	c := copy(w.buf[w.pos:], p)
	if c < len(p) {
		copy(w.buf, p[c:])
		w.full = true
	}
	w.pos = (w.pos + len(p)) % w.max
	if w.pos == 0 && len(p) > 0 {
		w.full = true
	}
	return n, nil
}

// copyBufs are ReadFrom's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom writes what it reads from r until EOF, through a pooled buffer:
// os/exec copies a step's output pipe with io.Copy, which would otherwise
// allocate 32 KiB for each stream of each step: 64 KiB of garbage per step.
func (w *tailWriter) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	var n int64
	for {
		m, err := r.Read(*bp)
		if m > 0 {
			_, _ = w.Write((*bp)[:m])
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// String returns the kept bytes, oldest first. When older bytes were
// dropped, a UTF-8 sequence cut at the start is dropped too.
func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.full {
		return string(w.buf[:w.pos])
	}
	out := make([]byte, 0, w.max)
	out = append(out, w.buf[w.pos:]...)
	out = append(out, w.buf[:w.pos]...)
	for i := 0; i < utf8.UTFMax-1 && len(out) > 0 && !utf8.RuneStart(out[0]); i++ {
		out = out[1:]
	}
	return string(out)
}

// Total is the number of bytes written, kept or not.
func (w *tailWriter) Total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}
