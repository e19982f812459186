package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvleader"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Bounds of the work one job page does on the results stream.
const (
	// resultsPerRequest and resultsTimePerRequest bound the results one
	// page request reads; the rest is read by the next request (the
	// histograms are kept per job and only grow).
	resultsPerRequest     = 20000
	resultsTimePerRequest = 300 * time.Millisecond
	// timelineBins is the number of bars of a job's throughput chart.
	timelineBins = 60
	// maxRuns is the last bucket of the runs-per-item histogram ("10+").
	maxRuns = 10
	// keptJobStats bounds the jobs whose histograms are kept in memory.
	keptJobStats = 64
	// breakerScan and breakerKept bound a job's breaker history: the
	// events read per request and the transitions shown.
	breakerScan = 500
	breakerKept = 50
)

// durationBounds are the upper bounds of the duration histogram's buckets
// (the last bucket has none).
var durationBounds = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute, 5 * time.Minute,
}

// jobStats are histograms of one job's results, read from the job's
// results subject once and then incrementally: a request reads only the
// results stored since the last one (up to a bound), whatever the job's
// size. Safe for concurrent use.
type jobStats struct {
	mu sync.Mutex
	// upTo is the results-stream sequence read up to; pending how many of
	// the job's results were left unread by the last request.
	upTo    uint64
	pending uint64
	read    int64 // results read (reopen markers and the reduce excluded)
	// origin and width place the timeline's bins; bins double in width
	// when the job outlasts them.
	origin time.Time
	width  time.Duration
	bins   []timeBin
	// steps[i] are step i's histograms.
	steps    []stepHist
	outcomes map[string]int64
	used     time.Time
}

// timeBin counts the results that finished within one bin.
type timeBin struct {
	Done, Retries, Failed int64
}

// stepHist is one step's runs-per-item and duration histograms.
type stepHist struct {
	Runs      [maxRuns + 1]int64 // Runs[n] items ran the step n times (Runs[maxRuns]: n >= maxRuns)
	Durations []int64            // by durationBounds, plus one for longer
	Items     int64
}

// firstBinWidth is the timeline's bin width until the job outlasts
// timelineBins of them (6 seconds); each doubling halves the resolution.
const firstBinWidth = 100 * time.Millisecond

func newJobStats() *jobStats {
	return &jobStats{outcomes: map[string]int64{}, width: firstBinWidth}
}

// add counts one result.
func (s *jobStats) add(r *messages.Result) {
	if r.Outcome == messages.OutcomeReopened || r.Phase != "" { // reduce and setup items are not the job's
		return
	}
	s.read++
	s.outcomes[r.Outcome]++
	s.addTime(r)
	runs := r.Steps
	if len(runs) == 0 {
		runs = []messages.StepRun{{Step: 0, Runs: max(r.Attempts, 1), DurationMS: r.DurationMS}}
	}
	for _, sr := range runs {
		if sr.Step < 0 || sr.Step > 1000 {
			continue // not a step of any job we accept
		}
		for len(s.steps) <= sr.Step {
			s.steps = append(s.steps, stepHist{Durations: make([]int64, len(durationBounds)+1)})
		}
		h := &s.steps[sr.Step]
		h.Items++
		h.Runs[min(max(sr.Runs, 0), maxRuns)]++
		h.Durations[durationBucket(time.Duration(sr.DurationMS)*time.Millisecond)]++
	}
}

func durationBucket(d time.Duration) int {
	i, _ := slices.BinarySearch(durationBounds, d) // the first bound >= d
	return i
}

// addTime counts r in the timeline, widening the bins as needed.
func (s *jobStats) addTime(r *messages.Result) {
	t := r.FinishedAt
	if t.IsZero() {
		return
	}
	if s.origin.IsZero() {
		s.origin = t.Truncate(firstBinWidth)
		s.bins = make([]timeBin, timelineBins)
	}
	if t.Before(s.origin) {
		t = s.origin // clocks of agents differ a little
	}
	i := int(t.Sub(s.origin) / s.width)
	for i >= timelineBins {
		for j := 0; j < timelineBins/2; j++ {
			a, b := s.bins[2*j], s.bins[2*j+1]
			s.bins[j] = timeBin{Done: a.Done + b.Done, Retries: a.Retries + b.Retries, Failed: a.Failed + b.Failed}
		}
		clear(s.bins[timelineBins/2:])
		s.width *= 2
		i = int(t.Sub(s.origin) / s.width)
	}
	b := &s.bins[i]
	b.Done++
	b.Retries += int64(r.Retries)
	if r.Outcome != messages.OutcomeSucceeded {
		b.Failed++
	}
}

// statsView is a copy of a job's histograms for a page.
type statsView struct {
	Read     int64
	Pending  uint64
	Origin   time.Time
	Width    time.Duration
	Bins     []timeBin
	Steps    []stepHist
	Outcomes map[string]int64
}

func (s *jobStats) view() statsView {
	v := statsView{Read: s.read, Pending: s.pending, Origin: s.origin, Width: s.width,
		Bins: append([]timeBin(nil), s.bins...), Outcomes: map[string]int64{}}
	for k, n := range s.outcomes {
		v.Outcomes[k] = n
	}
	for _, h := range s.steps {
		h.Durations = append([]int64(nil), h.Durations...)
		v.Steps = append(v.Steps, h)
	}
	return v
}

// statsCache keeps the histograms of the jobs looked at recently.
type statsCache struct {
	js    jetstream.JetStream
	names messages.Names
	now   func() time.Time

	mu   sync.Mutex
	jobs map[string]*jobStats
}

func newStatsCache(js jetstream.JetStream, names messages.Names, now func() time.Time) *statsCache {
	return &statsCache{js: js, names: names, now: now, jobs: map[string]*jobStats{}}
}

// get returns job's histograms, after reading what the results stream
// holds beyond what was read before (at most resultsPerRequest results or
// resultsTimePerRequest of reading).
// The timeline starts at start (the job's start) when it is known.
func (c *statsCache) get(ctx context.Context, job string, start time.Time) (statsView, error) {
	c.mu.Lock()
	s := c.jobs[job]
	if s == nil {
		s = newJobStats()
		if !start.IsZero() {
			s.origin = start.Truncate(firstBinWidth)
			s.bins = make([]timeBin, timelineBins)
		}
		c.jobs[job] = s
		c.evictLocked()
	}
	s.used = c.now()
	c.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	stream, err := c.js.Stream(ctx, c.names.ResultsStream())
	if err != nil {
		return s.view(), err
	}
	subject := c.names.JobResultsFilter(job) // every pool's results of the job
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return s.view(), nil
	}
	if err != nil {
		return s.view(), err
	}
	if last.Sequence <= s.upTo {
		s.pending = 0
		return s.view(), nil
	}
	deadline := time.Now().Add(resultsTimePerRequest)
	var decoded []messages.Result
	lastSeq, left, err := readSubject(ctx, c.js, stream, subject, s.upTo, last.Sequence, resultsPerRequest, deadline, func(data []byte, _ time.Time) {
		// One result or an agent's batch; an undecodable message has none.
		decoded, _ = wire.DecodeResults(data, decoded)
		for i := range decoded {
			s.add(&decoded[i])
		}
	})
	if lastSeq > s.upTo {
		s.upTo = lastSeq
	}
	s.pending = left
	return s.view(), err
}

func (c *statsCache) evictLocked() {
	for len(c.jobs) > keptJobStats {
		var oldest string
		var t time.Time
		for id, s := range c.jobs {
			s.mu.Lock()
			u := s.used
			s.mu.Unlock()
			if oldest == "" || u.Before(t) {
				oldest, t = id, u
			}
		}
		delete(c.jobs, oldest)
	}
}

// readSubject calls fn for the messages on subject of stream (of js) after
// sequence after, up to bound (which the stream's leader held), stopping
// after limit messages or at deadline. It returns the last sequence read
// and how many messages up to bound were left.
func readSubject(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, subject string, after, bound uint64, limit int, deadline time.Time, fn func(data []byte, stored time.Time)) (uint64, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: 30 * time.Second}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = after + 1
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return after, 0, fmt.Errorf("reading %s: %w", subject, err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	it, err := cons.Messages(jetstream.PullMaxBytes(natsconn.PullBytes)) // results are up to max_payload each
	if err != nil {
		return after, 0, fmt.Errorf("reading %s: %w", subject, err)
	}
	defer it.Stop()
	name := stream.CachedInfo().Config.Name
	lastSeq := after
	for n := 0; n < limit && time.Now().Before(deadline); n++ {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		m, err := it.Next(jetstream.NextContext(wctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return lastSeq, 0, ctx.Err()
			}
			break // the deadline: the rest is read next time
		}
		md, err := m.Metadata()
		if err != nil {
			return lastSeq, 0, err
		}
		if md.Sequence.Stream > bound {
			return lastSeq, 0, nil
		}
		lastSeq = md.Sequence.Stream
		fn(m.Data(), md.Timestamp)
		// bound is the leader's: a consumer's replica that lags it and
		// says nothing is pending does not end the read before the
		// deadline (kvleader.ReadOn).
		more, err := kvleader.ReadOn(ctx, js, name, subject, md, bound)
		if err != nil {
			return lastSeq, bound - lastSeq, fmt.Errorf("reading %s: %w", subject, err)
		}
		if !more {
			return lastSeq, 0, nil
		}
	}
	// Stopped early: what is left up to bound (an estimate: bound counts
	// every subject's messages; the subject's own count would cost a scan).
	return lastSeq, bound - lastSeq, nil
}

// breakerChange is one circuit-breaker transition of a job.
type breakerChange struct {
	Time                        time.Time
	From, To, Agent             string
	Failures, Successes, Probes int
}

// breakerHistory reads the job's breaker transitions from the events
// stream: at most breakerScan events, the last breakerKept of them.
func breakerHistory(ctx context.Context, js jetstream.JetStream, names messages.Names, job string) ([]breakerChange, bool, error) {
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		return nil, false, err
	}
	// Agents publish breaker events on <prefix>.events.<job>.breaker.<pool>.
	subject := names.EventSubject(job, messages.EventBreaker) + ".*"
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var out []breakerChange
	_, left, err := readSubject(ctx, js, stream, subject, 0, last.Sequence, breakerScan, time.Now().Add(resultsTimePerRequest), func(data []byte, stored time.Time) {
		var ev messages.Event
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		var d struct {
			From, To, Agent             string
			Failures, Successes, Probes int
			Step                        *int // a step's own breaker: not the job's history
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.Step != nil {
			return
		}
		t := ev.Time
		if t.IsZero() {
			t = stored
		}
		out = append(out, breakerChange{Time: t, From: d.From, To: d.To, Agent: d.Agent, Failures: d.Failures, Successes: d.Successes, Probes: d.Probes})
		if len(out) > breakerKept {
			out = out[1:]
		}
	})
	return out, left > 0, err
}
