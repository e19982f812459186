package shell

import (
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
