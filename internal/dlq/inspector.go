package dlq

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrEntryNotFound is returned by Get for a sequence that holds no entry.
var ErrEntryNotFound = errors.New("dlq: no such entry")

// ReasonUndecodable is the reason shown for a DLQ message that is not a
// DLQEntry (published to the DLQ by something else than jetfleet). Such
// entries can be listed and purged, not replayed.
const ReasonUndecodable = "undecodable"

// Defaults of the Inspector.
const (
	// DefaultIdleWait is how long a scan waits for the next message before it
	// checks whether the stream still holds any (entries deleted meanwhile).
	DefaultIdleWait = 2 * time.Second
	// startSlack widens DeliverByStartTime: entries are filtered on their
	// dead_lettered_at, which the writer's clock stamped before the server
	// stored them.
	startSlack = 5 * time.Minute
	// scanInactive lets the server drop a scan's consumer that was not
	// deleted (its client died).
	scanInactive = 30 * time.Second
	// purgeWorkers deletes entries concurrently (one API call each).
	purgeWorkers = 8
	// maxExampleLen bounds the example message kept per signature in Stats.
	maxExampleLen = 200
)

// Inspector reads, summarises, exports and deletes entries of the FLEET_DLQ
// stream. Every method scans the stream once with an ordered consumer (on
// <prefix>.dlq.<job> when the filter names a job), up to the stream's last
// entry when the scan starts, so that entries added meanwhile are not
// chased forever. Safe for concurrent use.
type Inspector struct {
	js        jetstream.JetStream
	names     messages.Names
	now       func() time.Time
	idleWait  time.Duration
	pageBytes int
	scanLimit int
}

// InspectorOption configures an Inspector.
type InspectorOption func(*Inspector)

// WithNow sets the time source for entry ages (default time.Now).
func WithNow(now func() time.Time) InspectorOption {
	return func(in *Inspector) { in.now = now }
}

// WithPageBytes bounds the JSON size of a List page (0 = unbounded): the
// API sets it below the server's max payload.
func WithPageBytes(n int) InspectorOption {
	return func(in *Inspector) { in.pageBytes = n }
}

// WithScanLimit bounds the DLQ messages one List call examines (0 = no
// bound): the cost of a page, however rare the filter's matches.
func WithScanLimit(n int) InspectorOption {
	return func(in *Inspector) { in.scanLimit = n }
}

// WithIdleWait sets how long a scan waits for a message before checking the
// stream for more. Defaults to DefaultIdleWait.
func WithIdleWait(d time.Duration) InspectorOption {
	return func(in *Inspector) { in.idleWait = d }
}

// NewInspector returns an inspector of the DLQ stream named by names.
func NewInspector(js jetstream.JetStream, names messages.Names, opts ...InspectorOption) *Inspector {
	in := &Inspector{js: js, names: names, now: time.Now, idleWait: DefaultIdleWait}
	for _, o := range opts {
		o(in)
	}
	return in
}

// scanned is one DLQ message as a scan sees it.
type scanned struct {
	ref    messages.DLQEntryRef
	size   int
	stored time.Time
	// copyStream and copySeq locate the entry's copy in its pool's
	// dead-letter stream (wire.PoolDLQStream), when it came from there.
	copyStream string
	copySeq    uint64
}

// streamSourceHeader is the header the server adds to a message a stream
// sourced: "<origin stream> <origin seq> …".
const streamSourceHeader = "Nats-Stream-Source"

// poolCopy reads the Nats-Stream-Source header of a DLQ message that the
// DLQ stream sourced from a pool's dead-letter stream: "<stream> <seq> …".
func (in *Inspector) poolCopy(h nats.Header, s *scanned) {
	src := h.Get(streamSourceHeader)
	if src == "" {
		return
	}
	fields := strings.Fields(src)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], wire.PoolDLQStreamPrefix(in.names)) {
		return
	}
	seq, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil || seq == 0 {
		return
	}
	s.copyStream, s.copySeq = fields[0], seq
}

// poolsWait bounds how long a scan waits for the DLQ stream to have
// sourced what the pools' dead-letter streams hold.
const poolsWait = 2 * time.Second

// awaitPools waits, up to poolsWait, until the DLQ stream holds a copy of
// every entry the pools' dead-letter streams hold, so that an entry an
// agent stored just before is seen: until, for each pool, the DLQ stream
// holds at least as many entries on the pool's subjects as the pool's
// stream holds (deletes remove both copies; the pool's copy, stored
// first, also expires first). It reads stream info only, never an entry.
func (in *Inspector) awaitPools(ctx context.Context, dlqStream jetstream.Stream) {
	wctx, cancel := context.WithTimeout(ctx, poolsWait)
	defer cancel()
	for {
		behind := false
		err := eachPoolStream(wctx, in.js, in.names, func(pool string, info *jetstream.StreamInfo) {
			if behind || info.State.Msgs == 0 {
				return
			}
			di, err := dlqStream.Info(wctx, jetstream.WithSubjectFilter(in.names.DLQSubject(pool, "*")))
			if err != nil {
				behind = true // unknown: ask again
				return
			}
			var sourced uint64
			for _, n := range di.State.Subjects {
				sourced += n
			}
			behind = sourced < info.State.Msgs
		})
		// A pool whose streams could not be listed or read may be behind:
		// ask again (a loaded server answered a replay's count with none of
		// the entries its job had just dead-lettered).
		if err != nil {
			behind = true
		}
		if !behind {
			return
		}
		select {
		case <-wctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// deleteEntry deletes the entry s from the DLQ stream and then its copy
// from its pool's dead-letter stream, which frees the pool's quota. A copy
// that is gone already is no error; gone reports the entry itself was.
func (in *Inspector) deleteEntry(ctx context.Context, dlqStream jetstream.Stream, s *scanned) (gone bool, err error) {
	err = dlqStream.DeleteMsg(ctx, s.ref.Seq)
	if isNotFound(err) {
		gone, err = true, nil
	}
	if err != nil || s.copyStream == "" {
		return gone, err
	}
	pool, err := in.js.Stream(ctx, s.copyStream)
	if err == nil {
		err = pool.DeleteMsg(ctx, s.copySeq)
	}
	if err != nil && !isNotFound(err) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return gone, fmt.Errorf("dlq: delete the copy %s/%d of the pool's quota: %w", s.copyStream, s.copySeq, err)
	}
	return gone, nil
}

// scan calls fn for every entry that m selects, in stream order, after
// f.AfterSeq and up to the last sequence at the start (or upTo when not 0),
// at most f.Limit of them when set. fn returns false to stop. scan returns
// the bound it used (0 = the stream held nothing to scan).
func (in *Inspector) scan(ctx context.Context, m *Matcher, upTo uint64, fn func(*scanned) bool) (uint64, error) {
	end, err := in.scanLimited(ctx, m, upTo, 0, fn)
	return end.bound, err
}

// scanEnd is where a scan stopped.
type scanEnd struct {
	bound    uint64 // the last sequence the scan would have read
	last     uint64 // the last sequence it examined (0 = none)
	examined int
	// limited is set when the scan stopped after examining maxExamined
	// messages, before bound.
	limited bool
}

// scanLimited is scan that stops after examining maxExamined messages
// (matching or not; 0 = no limit), so that the work of one request is
// bounded however rare its matches are.
func (in *Inspector) scanLimited(ctx context.Context, m *Matcher, upTo uint64, maxExamined int, fn func(*scanned) bool) (scanEnd, error) {
	var end scanEnd
	bound, err := in.scanEach(ctx, m, upTo, func(seq uint64) bool {
		if maxExamined > 0 && end.examined == maxExamined {
			end.limited = true
			return false
		}
		end.examined++
		end.last = seq
		return true
	}, fn)
	end.bound = bound
	return end, err
}

// scanEach is scan with examine called for every message before it is
// decoded; examine returns false to stop before it.
func (in *Inspector) scanEach(ctx context.Context, m *Matcher, upTo uint64, examine func(seq uint64) bool, fn func(*scanned) bool) (uint64, error) {
	f := m.Filter()
	stream, err := in.js.Stream(ctx, in.names.DLQStream())
	if err != nil {
		return 0, fmt.Errorf("dlq: stream %s: %w", in.names.DLQStream(), err)
	}
	in.awaitPools(ctx, stream)
	subject := in.names.DLQFilter()
	var bound uint64
	if f.JobID != "" {
		subject = in.names.JobDLQFilter(f.JobID)
		// The leader's bounds (internal/kvleader): a full node's replica
		// may answer first, with an error or its old copy.
		last, err := kvleader.LastStored(ctx, in.js, in.names.DLQStream(), subject)
		if err != nil {
			return 0, fmt.Errorf("dlq: last entry of %s: %w", f.JobID, err)
		}
		if last == 0 {
			return 0, nil
		}
		bound = last
	} else {
		info, err := kvleader.StreamInfo(ctx, in.js, in.names.DLQStream())
		if err != nil {
			return 0, fmt.Errorf("dlq: stream info: %w", err)
		}
		if info.State.Msgs == 0 {
			return 0, nil
		}
		bound = info.State.LastSeq
	}
	if upTo > 0 && upTo < bound {
		bound = upTo
	}
	if bound <= f.AfterSeq {
		return bound, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: scanInactive}
	switch {
	case f.AfterSeq > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = f.AfterSeq + 1
	case !f.Since.IsZero():
		start := f.Since.Add(-startSlack)
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	// Entries are up to max_payload each: pull by bytes, and no more than
	// two pages' worth when a page is bounded.
	pull := natsconn.PullBytes
	if in.pageBytes > 0 {
		pull = min(pull, max(2*in.pageBytes, 2<<20))
	}
	var (
		cons jetstream.Consumer
		it   jetstream.MessagesContext
	)
	// closeIt stops the scan's consumer and removes it now rather than
	// after its inactivity threshold: scans are frequent (every list call).
	closeIt := func() {
		if it == nil {
			return
		}
		it.Stop()
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}
		cons, it = nil, nil
	}
	defer closeIt()
	open := func() error {
		var err error
		if cons, err = stream.OrderedConsumer(ctx, cfg); err != nil {
			return fmt.Errorf("dlq: scan consumer: %w", err)
		}
		if it, err = cons.Messages(jetstream.PullMaxBytes(pull)); err != nil {
			it = nil
			return fmt.Errorf("dlq: scan: %w", err)
		}
		return nil
	}
	if err := open(); err != nil {
		return 0, err
	}
	var lastSeen uint64
	matched := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, in.idleWait)
		msg, err := it.Next(jetstream.NextContext(wctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return bound, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Nothing came: the entries still to see may have been deleted.
				more, err := kvleader.StoredAfter(ctx, in.js, in.names.DLQStream(), subject, lastSeen, bound)
				if err != nil {
					return bound, fmt.Errorf("dlq: scan: %w", err)
				}
				if !more {
					return bound, nil
				}
				// The leader holds more, and the consumer's replica (R1,
				// placed at random) delivered nothing for idleWait: it
				// may have stopped applying writes (a node whose store
				// is full), and would keep the scan waiting until the
				// request's deadline. Read on with a new consumer, from
				// the entry after the last one seen.
				closeIt()
				if lastSeen > 0 {
					cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, lastSeen+1, nil
				}
				if err := open(); err != nil {
					return bound, err
				}
				continue
			}
			return bound, fmt.Errorf("dlq: scan: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return bound, fmt.Errorf("dlq: scan: %w", err)
		}
		seq := md.Sequence.Stream
		if seq > bound {
			return bound, nil
		}
		if !f.Until.IsZero() && md.Timestamp.After(f.Until.Add(startSlack)) {
			return bound, nil // stored in order: nothing later can match
		}
		if !examine(seq) {
			return bound, nil
		}
		lastSeen = seq
		// rejectRaw: the text filter cannot match, no need to decode.
		if !m.rejectRaw(msg.Data()) {
			s := &scanned{ref: messages.DLQEntryRef{Seq: seq}, size: msgSize(msg), stored: md.Timestamp}
			in.poolCopy(msg.Headers(), s)
			in.decode(msg.Subject(), msg.Data(), &s.ref)
			if m.Match(&s.ref.Entry) {
				if !fn(s) {
					return bound, nil
				}
				matched++
				if f.Limit > 0 && matched >= f.Limit {
					return bound, nil
				}
			}
		}
		// bound is the leader's: a consumer's replica that lags it and
		// says nothing is pending does not end the scan
		// (kvleader.ReadOn); the idle wait above bounds the wait for it.
		more, err := kvleader.ReadOn(ctx, in.js, in.names.DLQStream(), subject, md, bound)
		if err != nil {
			return bound, fmt.Errorf("dlq: scan: %w", err)
		}
		if !more {
			return bound, nil
		}
	}
}

func msgSize(m jetstream.Msg) int {
	n := len(m.Subject()) + len(m.Data())
	for k, vs := range m.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// decode decodes the DLQ message on subject into ref. The entry's origin
// is the subject's (who wrote it); for an agent's entry it is also the
// entry's pool, whatever the body claims: an agent may publish only on its
// own pool's subjects.
func (in *Inspector) decode(subject string, data []byte, ref *messages.DLQEntryRef) {
	origin, job, ok := wire.ParseDLQ(in.names, subject)
	if !ok {
		job = "unknown"
	}
	ref.Origin = origin
	decodeEntry(job, data, &ref.Entry)
	if ref.Origin != "" && ref.Origin != messages.CoordinatorOrigin {
		ref.Entry.Pool = ref.Origin
	}
}

// decodeEntry decodes a DLQ message body; a body that is not an entry
// becomes one of job (its subject's) with reason "undecodable", so it can
// be seen and purged.
func decodeEntry(job string, data []byte, e *messages.DLQEntry) {
	if err := json.Unmarshal(data, e); err == nil && e.JobID != "" {
		return
	} else {
		payload, _ := json.Marshal(string(data))
		msg := "not a DLQ entry"
		if err != nil {
			msg += ": " + err.Error()
		}
		*e = messages.DLQEntry{JobID: job, Payload: payload, Reason: ReasonUndecodable, Error: msg, ErrorClass: "error"}
	}
}

// Page is one page of List.
type Page struct {
	Entries []messages.DLQEntryRef
	// More is set when entries after NextSeq may match too: the page is
	// full, or the scan limit stopped the scan first.
	More    bool
	NextSeq uint64
	// Examined is the number of DLQ messages the scan read.
	Examined int
}

// List returns the matching entries in stream order, at most f.Limit (when
// set) and, with WithPageBytes, no more than fit in that many bytes of JSON.
// With WithScanLimit it examines at most that many messages: a filter that
// matches few of them returns a short (even empty) page with More set and
// NextSeq the last sequence examined, where the next page goes on.
func (in *Inspector) List(ctx context.Context, f messages.DLQFilter) (*Page, error) {
	if err := ValidateFilter(f); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit > 0 {
		f.Limit = limit + 1 // one more tells whether there is a next page
	}
	page := &Page{Entries: []messages.DLQEntryRef{}}
	size := 2 // the brackets of the JSON array
	end, err := in.scanLimited(ctx, NewMatcher(f), 0, in.scanLimit, func(s *scanned) bool {
		full := limit > 0 && len(page.Entries) >= limit
		if !full && in.pageBytes > 0 {
			b, _ := json.Marshal(&s.ref)
			size += len(b) + 1
			full = size > in.pageBytes && len(page.Entries) > 0 // one entry always goes
		}
		if full {
			page.More = true
			return false
		}
		page.Entries = append(page.Entries, s.ref)
		page.NextSeq = s.ref.Seq
		return true
	})
	if err != nil {
		return nil, err
	}
	page.Examined = end.examined
	if end.limited && !page.More {
		page.More, page.NextSeq = true, end.last
	}
	if !page.More {
		page.NextSeq = 0
	}
	return page, nil
}

// Get returns the entry at DLQ stream sequence seq.
func (in *Inspector) Get(ctx context.Context, seq uint64) (*messages.DLQEntryRef, error) {
	stream, err := in.js.Stream(ctx, in.names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s: %w", in.names.DLQStream(), err)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrEntryNotFound, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: get %d: %w", seq, err)
	}
	ref := &messages.DLQEntryRef{Seq: raw.Sequence}
	in.decode(raw.Subject, raw.Data, ref)
	return ref, nil
}

// Stats summarises the matching entries: counts by job, reason, error class
// and signature, their bytes and the age of the oldest; plus the whole
// stream's size against its limits.
func (in *Inspector) Stats(ctx context.Context, f messages.DLQFilter) (*messages.DLQStats, error) {
	if err := ValidateFilter(f); err != nil {
		return nil, err
	}
	st := &messages.DLQStats{
		ByJob: map[string]int64{}, ByReason: map[string]int64{}, ByErrorClass: map[string]int64{},
		BySignature: map[string]int64{}, Examples: map[string]string{},
	}
	var oldest time.Time
	_, err := in.scan(ctx, NewMatcher(f), 0, func(s *scanned) bool {
		e := &s.ref.Entry
		st.Total++
		st.Bytes += uint64(s.size)
		st.ByJob[e.JobID]++
		st.ByReason[e.Reason]++
		st.ByErrorClass[e.ErrorClass]++
		if e.Signature != "" {
			st.BySignature[e.Signature]++
			if _, ok := st.Examples[e.Signature]; !ok {
				st.Examples[e.Signature] = shorten(e.Error, maxExampleLen)
			}
		}
		t := e.DeadLetteredAt
		if t.IsZero() {
			t = s.stored
		}
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if !oldest.IsZero() {
		st.OldestAgeMS = max(0, in.now().Sub(oldest).Milliseconds())
	}
	if st.Stream, err = in.StreamState(ctx); err != nil {
		return nil, err
	}
	if st.Pools, err = in.PoolStates(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// PoolStates returns each pool's dead letters against its quota, in pool
// order; a pool with agents and no dead-letter stream has only Pool and
// Problem set.
func (in *Inspector) PoolStates(ctx context.Context) ([]messages.DLQStreamState, error) {
	var out []messages.DLQStreamState
	err := eachPool(ctx, in.js, in.names, true, func(pool string, info *jetstream.StreamInfo) {
		if info == nil {
			out = append(out, messages.DLQStreamState{Pool: pool, Problem: MissingPoolProblem(in.names, pool)})
			return
		}
		s := streamState(info)
		s.Pool = pool
		out = append(out, *s)
	})
	return out, err
}

// StreamState returns the DLQ stream's size and limits.
func (in *Inspector) StreamState(ctx context.Context) (*messages.DLQStreamState, error) {
	stream, err := in.js.Stream(ctx, in.names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s: %w", in.names.DLQStream(), err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: stream info: %w", err)
	}
	return streamState(info), nil
}

func streamState(info *jetstream.StreamInfo) *messages.DLQStreamState {
	s := &messages.DLQStreamState{
		Messages: info.State.Msgs, Bytes: info.State.Bytes,
		MaxMessages: info.Config.MaxMsgs, MaxBytes: info.Config.MaxBytes, MaxAgeMS: info.Config.MaxAge.Milliseconds(),
	}
	if s.MaxMessages > 0 {
		s.FillRatio = float64(s.Messages) / float64(s.MaxMessages)
	}
	if s.MaxBytes > 0 {
		s.FillRatio = max(s.FillRatio, float64(s.Bytes)/float64(s.MaxBytes))
	}
	return s
}

// Export writes the matching entries to w as JSON lines, one
// {"seq": …, "entry": {…}} object per line, and returns how many it wrote.
func (in *Inspector) Export(ctx context.Context, f messages.DLQFilter, w io.Writer) (int64, error) {
	if err := ValidateFilter(f); err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	var n int64
	var werr error
	_, err := in.scan(ctx, NewMatcher(f), 0, func(s *scanned) bool {
		if werr = enc.Encode(&s.ref); werr != nil {
			return false
		}
		n++
		return true
	})
	if err == nil {
		err = werr
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// Purge deletes the matching entries and returns how many it deleted.
// Entries deleted meanwhile by someone else are not counted.
func (in *Inspector) Purge(ctx context.Context, f messages.DLQFilter) (int64, error) {
	if err := ValidateFilter(f); err != nil {
		return 0, err
	}
	stream, err := in.js.Stream(ctx, in.names.DLQStream())
	if err != nil {
		return 0, fmt.Errorf("dlq: stream %s: %w", in.names.DLQStream(), err)
	}
	var entries []*scanned
	if _, err := in.scan(ctx, NewMatcher(f), 0, func(s *scanned) bool {
		entries = append(entries, s)
		return true
	}); err != nil {
		return 0, err
	}
	var (
		mu     sync.Mutex
		purged int64
		errs   []error
		// A plain group: a failed delete does not stop the others; every
		// failure is reported.
		g errgroup.Group
	)
	g.SetLimit(purgeWorkers)
	for _, s := range entries {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			gone, err := in.deleteEntry(ctx, stream, s)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("dlq: delete %d: %w", s.ref.Seq, err))
			case !gone:
				purged++
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines report in errs
	if len(errs) > 0 {
		return purged, errors.Join(errs...)
	}
	return purged, ctx.Err()
}

// isNotFound reports a delete of a message that is already gone. The
// server refuses it with "no message found" (10057), which nats.go reports
// as ErrMsgDeleteUnsuccessful with the server's text only; a refusal is the
// only way a delete of an existing entry of a Limits stream fails short of
// a transport error, which comes back as another error.
func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful)
}

// Group counts entries by job, error class and signature (dry runs).
type Group struct {
	Matched      int64
	ByJob        map[string]int64
	ByErrorClass map[string]int64
	BySignature  map[string]int64
}

func newGroup() *Group {
	return &Group{ByJob: map[string]int64{}, ByErrorClass: map[string]int64{}, BySignature: map[string]int64{}}
}

func (g *Group) add(e *messages.DLQEntry) {
	g.Matched++
	g.ByJob[e.JobID]++
	g.ByErrorClass[e.ErrorClass]++
	if e.Signature != "" {
		g.BySignature[e.Signature]++
	}
}

// Top returns the keys of counts, largest count first (ties by key).
func Top(counts map[string]int64) []string {
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	return keys
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
