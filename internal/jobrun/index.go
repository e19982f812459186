package jobrun

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/api"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// jobs.list bounds.
const (
	// DefaultListLimit and MaxListLimit are jobs.list's page sizes
	// (internal/api checks a request's).
	DefaultListLimit = api.DefaultListLimit
	MaxListLimit     = api.MaxListLimit
	// listScanLimit bounds the jobs one jobs.list request examines when it
	// filters by pool or text (the state filter has its own index): a page
	// may then come back short, with a cursor to go on from.
	listScanLimit = 20000
	// indexWait bounds how long jobs.list waits for the index to load
	// (requests to one endpoint are served one at a time).
	indexWait = 10 * time.Second
	// rewatchDelay is the pause before the index watches the bucket again.
	rewatchDelay = time.Second
)

// errBadCursor is returned for a jobs.list cursor this coordinator did not make.
var errBadCursor = errors.New("coordinator: bad cursor")

// jobIndex is the coordinator's in-memory index of job summaries, kept from
// a watch of the jobs bucket (and fed directly by the coordinator's own
// writes, so a job it just stored is listed at once). It holds every job
// sorted newest submission first, and the same per state, so that a
// jobs.list page costs O(log n + page) however many jobs there are.
// Entries are applied in revision order: an older revision never replaces
// a newer one. Safe for concurrent use.
type jobIndex struct {
	mu      sync.RWMutex
	byID    map[string]*indexEntry
	all     []*indexEntry            // newest first (see less)
	byState map[string][]*indexEntry // the same order
	ready   chan struct{}            // closed once the watch delivered the initial values
	once    sync.Once
	// scanLimit bounds the jobs a filtered request examines (listScanLimit).
	scanLimit int
}

// indexEntry is one job in the index. It is replaced, never modified.
type indexEntry struct {
	rev    uint64
	status messages.JobStatus // a summary
}

// indexKey orders the index: newest submission first, then by id.
type indexKey struct {
	submitted time.Time
	id        string
}

func (e *indexEntry) key() indexKey { return indexKey{e.status.SubmittedAt, e.status.ID} }

// before reports whether a sorts before b (a is newer, or as new and its
// id is smaller).
func (a indexKey) before(b indexKey) bool {
	if !a.submitted.Equal(b.submitted) {
		return a.submitted.After(b.submitted)
	}
	return a.id < b.id
}

func newJobIndex() *jobIndex {
	return &jobIndex{
		byID: map[string]*indexEntry{}, byState: map[string][]*indexEntry{},
		ready: make(chan struct{}), scanLimit: listScanLimit,
	}
}

// markReady records that the initial values are in.
func (x *jobIndex) markReady() { x.once.Do(func() { close(x.ready) }) }

// wait blocks until the index holds the bucket's initial values.
func (x *jobIndex) wait(ctx context.Context) error {
	select {
	case <-x.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// put records a job's status at revision rev, unless the index already
// has that revision or a newer one.
func (x *jobIndex) put(rev uint64, st *messages.JobStatus) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.byID[st.ID]
	if old != nil && old.rev >= rev {
		return
	}
	e := &indexEntry{rev: rev, status: st.Summary()}
	if old != nil {
		x.removeLocked(old)
	}
	x.byID[st.ID] = e
	x.all = insertSorted(x.all, e)
	x.byState[e.status.State] = insertSorted(x.byState[e.status.State], e)
}

// has reports whether the index holds revision rev of job id or a newer one.
// unfinished returns the ids of the jobs pending, scheduled, running or
// paused.
func (x *jobIndex) unfinished() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var ids []string
	for _, state := range []string{messages.StatePending, messages.StateScheduled, messages.StateRunning, messages.StatePaused} {
		for _, e := range x.byState[state] {
			ids = append(ids, e.status.ID)
		}
	}
	return ids
}

// unfinishedCount is len(unfinished()).
func (x *jobIndex) unfinishedCount() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byState[messages.StatePending]) + len(x.byState[messages.StateRunning]) + len(x.byState[messages.StatePaused])
}

func (x *jobIndex) has(id string, rev uint64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.byID[id]
	return e != nil && e.rev >= rev
}

// remove drops job id (deleted at revision rev).
func (x *jobIndex) remove(id string, rev uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.byID[id]; e != nil && e.rev < rev {
		x.removeLocked(e)
		delete(x.byID, id)
	}
}

func (x *jobIndex) removeLocked(e *indexEntry) {
	x.all = removeSorted(x.all, e)
	s := e.status.State
	if x.byState[s] = removeSorted(x.byState[s], e); len(x.byState[s]) == 0 {
		delete(x.byState, s)
	}
}

// search returns the position of the first entry of s not before k.
func search(s []*indexEntry, k indexKey) int {
	return sort.Search(len(s), func(i int) bool { return !s[i].key().before(k) })
}

func insertSorted(s []*indexEntry, e *indexEntry) []*indexEntry {
	i := search(s, e.key())
	s = append(s, nil)
	copy(s[i+1:], s[i:])
	s[i] = e
	return s
}

func removeSorted(s []*indexEntry, e *indexEntry) []*indexEntry {
	for i := search(s, e.key()); i < len(s) && !e.key().before(s[i].key()); i++ {
		if s[i] == e {
			copy(s[i:], s[i+1:])
			s[len(s)-1] = nil
			return s[:len(s)-1]
		}
	}
	return s
}

// list answers a jobs.list request from the index.
func (x *jobIndex) list(req messages.ListRequest) (messages.ListReply, error) {
	limit := req.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	var after *indexKey
	if req.Cursor != "" {
		k, err := decodeCursor(req.Cursor)
		if err != nil {
			return messages.ListReply{}, err
		}
		after = &k
	}
	text := strings.ToLower(req.Text)
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.all
	if req.State != "" {
		s = x.byState[req.State]
	}
	reply := messages.ListReply{Jobs: []messages.JobStatus{}, Total: len(s), States: make(map[string]int, len(x.byState))}
	for st, es := range x.byState {
		reply.States[st] = len(es)
	}
	i := 0
	if after != nil {
		i = sort.Search(len(s), func(i int) bool { return after.before(s[i].key()) })
	}
	scanned := 0
	for ; i < len(s); i++ {
		st := &s[i].status
		if len(reply.Jobs) == limit || scanned == x.scanLimit {
			// The last job returned (or examined) is where the next page starts.
			reply.NextCursor = encodeCursor(s[i-1].key())
			break
		}
		scanned++
		if req.Pool != "" && st.Pool != req.Pool {
			continue
		}
		if text != "" && !strings.Contains(strings.ToLower(st.ID), text) && !strings.Contains(strings.ToLower(st.Name), text) {
			continue
		}
		reply.Jobs = append(reply.Jobs, *st)
	}
	return reply, nil
}

// A cursor is "<submitted unix nanoseconds>.<job id>", base64url-encoded:
// opaque to callers, and stable while jobs are added and removed.
func encodeCursor(k indexKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.submitted.UnixNano(), 10) + "." + k.id))
}

func decodeCursor(c string) (indexKey, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return indexKey{}, fmt.Errorf("%w: not base64url", errBadCursor)
	}
	ns, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || messages.ValidToken(id) != nil {
		return indexKey{}, fmt.Errorf("%w: not a jobs.list cursor", errBadCursor)
	}
	return indexKey{submitted: time.Unix(0, n), id: id}, nil
}

// keep follows the jobs bucket until ctx ends, watching it again (after
// rewatchDelay) whenever a watch fails or ends.
func (x *jobIndex) keep(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger) {
	for {
		err := x.follow(ctx, kv, func(err error) { log.Warn().Err(err).Msg("job index: entry skipped") })
		if ctx.Err() != nil {
			return
		}
		log.Warn().Err(err).Msg("job index: watch of the jobs bucket ended; watching again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(rewatchDelay):
		}
	}
}

// follow keeps the index from a watch of the jobs bucket until ctx ends.
// The watch carries no values (a running job's record, spec included, is
// rewritten every status interval, and those writes are the coordinator's
// own, already in the index): a revision the index lacks (a record this
// coordinator did not write, or the initial values) is read with a Get.
func (x *jobIndex) follow(ctx context.Context, kv jetstream.KeyValue, onErr func(error)) error {
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("coordinator: watching %s: %w", kv.Bucket(), err)
	}
	return kvwatch.Watch(ctx, w, x.markReady, func(e jetstream.KeyValueEntry) { x.apply(ctx, kv, e, onErr) })
}

// apply records one watched entry.
func (x *jobIndex) apply(ctx context.Context, kv jetstream.KeyValue, e jetstream.KeyValueEntry, onErr func(error)) {
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		x.remove(e.Key(), e.Revision())
		return
	}
	if x.has(e.Key(), e.Revision()) {
		return // our own write, already applied
	}
	gctx, cancel := context.WithTimeout(ctx, indexWait)
	got, err := kv.Get(gctx, e.Key())
	cancel()
	if err != nil {
		// Deleted meanwhile (the watch brings the delete next), or the
		// server is away: the next write of the job brings it back.
		if !errors.Is(err, jetstream.ErrKeyNotFound) && onErr != nil && ctx.Err() == nil {
			onErr(fmt.Errorf("reading job record %q: %w", e.Key(), err))
		}
		return
	}
	var rec struct {
		Status messages.JobStatus `json:"status"`
	}
	if err := json.Unmarshal(got.Value(), &rec); err != nil || rec.Status.ID != got.Key() {
		if onErr != nil {
			onErr(fmt.Errorf("job record %q (revision %d) is not a job record: %v", got.Key(), got.Revision(), err))
		}
		return
	}
	x.put(got.Revision(), &rec.Status)
}

// finished returns the summaries of the jobs in a final state that keep
// says to keep (for retention), oldest submission first. keep runs under
// the index's read lock: it must not call back into the index.
func (x *jobIndex) finished(keep func(*messages.JobStatus) bool) []messages.JobStatus {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []messages.JobStatus
	for state, s := range x.byState {
		if !messages.TerminalState(state) {
			continue
		}
		for i := len(s) - 1; i >= 0; i-- {
			if keep(&s[i].status) {
				out = append(out, s[i].status)
			}
		}
	}
	return out
}
