package simulate

// The simulator's containers are typed and grow in place, so that the event
// loop allocates nothing once they have reached their working size
// (container/heap would box every event in an interface).

// Event kinds.
const (
	evDone      uint8 = iota + 1 // a step run (or a fallback) ends
	evReady                      // a delayed nak is due: the message is redeliverable
	evDeadline                   // best_effort.deadline
	evLimit                      // a run waiting in its agent for its step's limit asks again
	evLimitKick                  // a run waiting in its agent is handed a slot another of its runs freed
	evLocal                      // a local retry is due: back into its agent's buffer
)

// Outcomes of a step run, in event.run.
const (
	runOK       uint8 = iota // the step succeeded
	runFailed                // the dependency failed the call
	runTimedOut              // the step's timeout cut the call
	runFallback              // the step's on_failure fallback ran (and succeeded)
)

// event is one entry of the time-ordered queue. Events at the same instant
// are handled in the order they were scheduled (seq).
type event struct {
	at    int64 // virtual time, ns from the start of the job
	seq   uint64
	item  int32
	agent int32
	kind  uint8
	run   uint8
}

func (e *event) before(f *event) bool {
	return e.at < f.at || e.at == f.at && e.seq < f.seq
}

// eventHeap is a binary min-heap of events by (at, seq).
type eventHeap struct {
	h   []event
	seq uint64
}

func (q *eventHeap) len() int { return len(q.h) }

func (q *eventHeap) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	h := q.h
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventHeap) pop() event {
	h := q.h
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	q.h = h[:n]
	h = q.h
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top
}

// ring is a FIFO queue that grows by doubling (its length is a power of
// two, so positions wrap with a mask).
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		next := make([]T, max(2*len(r.buf), 16))
		for i := 0; i < r.n; i++ {
			next[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = next, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}
