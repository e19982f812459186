package ui

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/internal/kvwatch"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Live-update settings.
const (
	// seriesStep and seriesBuckets shape the fleet's throughput chart: 15
	// minutes in 5-second buckets.
	seriesStep    = 5 * time.Second
	seriesBuckets = 180
	// jobRateBuckets is the window of a job's throughput (1 minute).
	jobRateBuckets = 12
	// maxEventsPerFlush bounds the events sent to a browser per flush;
	// the rest are counted, not sent (a burst of item failures must not
	// flood the page).
	maxEventsPerFlush = 50
	// forgetJobAfter drops the throughput of a job not updated for this long.
	forgetJobAfter = 10 * time.Minute
	// seriesEvery sends the fleet's series every this many flushes.
	seriesEvery = 10
	// resubscribeDelay is the pause before a failed watch or subscription
	// is tried again.
	resubscribeDelay = 2 * time.Second
)

// hub feeds the browsers' live updates. It holds one watch of the jobs
// bucket, one subscription to the fleet's events and one watch of the
// agents bucket, whatever the number of browsers; it coalesces job updates
// (a running job's record changes every 250 ms) and sends each browser,
// every flush interval, what it asked for. Each browser has a bounded
// queue: one that falls behind is disconnected (its EventSource
// reconnects and the page catches up), never waited for. Safe for
// concurrent use.
type hub struct {
	cfg     Config
	log     zerolog.Logger
	metrics *metrics

	mu      sync.Mutex
	clients map[*client]struct{}
	pending map[string]messages.JobStatus // job updates since the last flush
	events  []liveEvent                   // events since the last flush
	skipped int                           // events not kept since the last flush
	agents  map[string]messages.AgentPresence
	agentsV int // bumped by every change of agents
	jobs    map[string]*jobTrack
	fleet   *series
	sources map[string]error // jobs, events, agents: nil = live
	flushes int
}

// jobTrack is what the hub remembers of a job: its last counts (for the
// throughput deltas) and its recent throughput.
type jobTrack struct {
	done, retries int64
	rate          *series
	seen, first   time.Time
}

// liveEvent is a fleet event on its way to the browsers.
type liveEvent struct {
	job  string
	data json.RawMessage
}

// client is one browser's live stream.
type client struct {
	ch        chan []byte
	jobs      map[string]bool // send these jobs' updates and events
	allEvents bool            // send every job's events
	series    bool            // send the fleet's throughput series
	agents    bool            // send the agents' presence
	agentsV   int
}

func newHub(cfg Config, log zerolog.Logger, m *metrics) *hub {
	return &hub{
		cfg: cfg, log: log, metrics: m,
		clients: map[*client]struct{}{},
		pending: map[string]messages.JobStatus{},
		agents:  map[string]messages.AgentPresence{},
		jobs:    map[string]*jobTrack{},
		fleet:   newSeries(seriesStep, seriesBuckets),
		sources: map[string]error{
			"jobs": errors.New("starting"), "events": errors.New("starting"), "agents": errors.New("starting"),
		},
	}
}

// errTooManyClients refuses a live stream beyond Config.MaxClients.
var errTooManyClients = errors.New("ui: too many browsers connected for live updates")

// subscribe registers a browser; unsubscribe must follow.
func (h *hub) subscribe(c *client) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) >= h.cfg.MaxClients {
		return errTooManyClients
	}
	c.ch = make(chan []byte, h.cfg.ClientBuffer)
	h.clients[c] = struct{}{}
	h.metrics.clients.Set(float64(len(h.clients)))
	return nil
}

// unsubscribe removes a browser (if the hub has not dropped it already).
func (h *hub) unsubscribe(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.clients[c]; ok {
		delete(h.clients, c)
		close(c.ch)
		h.metrics.clients.Set(float64(len(h.clients)))
	}
}

// sendLocked queues a frame for c, dropping c if its queue is full.
func (h *hub) sendLocked(c *client, frame []byte) {
	select {
	case c.ch <- frame:
	default:
		delete(h.clients, c)
		close(c.ch)
		h.metrics.clients.Set(float64(len(h.clients)))
		h.metrics.dropped.Inc()
		h.log.Debug().Msg("a browser fell behind the live updates; disconnected")
	}
}

// jobUpdate records a job's new status.
func (h *hub) jobUpdate(st *messages.JobStatus) {
	now := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending[st.ID] = st.Summary()
	tr := h.jobs[st.ID]
	if tr == nil {
		// The first update seen: a baseline, no delta.
		h.jobs[st.ID] = &jobTrack{done: st.Done(), retries: st.Retries, rate: newSeries(seriesStep, jobRateBuckets), seen: now, first: now}
		return
	}
	dd, dr := max(st.Done()-tr.done, 0), max(st.Retries-tr.retries, 0)
	tr.done, tr.retries, tr.seen = st.Done(), st.Retries, now
	h.fleet.add(now, dd, dr)
	tr.rate.add(now, dd, dr)
}

// rate is job id's throughput over the last minute (items/s), and
// whether the hub follows it.
func (h *hub) rate(id string) (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tr := h.jobs[id]
	if tr == nil {
		return 0, false
	}
	return tr.recent(h.cfg.Clock.Now()), true
}

// recent is the job's throughput over the last minute, or since the hub
// first saw it when that is less.
func (tr *jobTrack) recent(now time.Time) float64 {
	done, _ := tr.rate.rates(now)
	var sum float64
	for _, r := range done {
		sum += r * seriesStep.Seconds()
	}
	window := min(now.Sub(tr.first), jobRateBuckets*seriesStep)
	return sum / max(window.Seconds(), 1)
}

// fleetRates is the fleet's throughput and retry rate, oldest first.
func (h *hub) fleetRates() (done, retries []float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fleet.rates(h.cfg.Clock.Now())
}

// event records a fleet event published on <prefix>.events.<job>.<type>.
func (h *hub) event(job string, data []byte) {
	if !json.Valid(data) {
		data, _ = json.Marshal(map[string]string{"type": "Unreadable", "job_id": job})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) >= maxEventsPerFlush {
		h.skipped++
		return
	}
	h.events = append(h.events, liveEvent{job: job, data: data})
}

// agentUpdate records an agent's presence (nil: gone).
func (h *hub) agentUpdate(key string, p *messages.AgentPresence) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p == nil {
		delete(h.agents, key)
	} else {
		h.agents[key] = *p
	}
	h.agentsV++
}

// agentList is every agent's presence, by pool then name.
func (h *hub) agentList() []messages.AgentPresence {
	h.mu.Lock()
	out := make([]messages.AgentPresence, 0, len(h.agents))
	for _, p := range h.agents {
		out = append(out, p)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b messages.AgentPresence) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Name, b.Name))
	})
	return out
}

// sourceErrors reports the live sources that are down ("" = all up).
func (h *hub) sourceErrors() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var down []string
	for _, name := range []string{"jobs", "events", "agents"} {
		if err := h.sources[name]; err != nil {
			down = append(down, name+": "+err.Error())
		}
	}
	return strings.Join(down, "; ")
}

func (h *hub) setSource(name string, err error) {
	h.mu.Lock()
	h.sources[name] = err
	h.mu.Unlock()
}

// liveJob is a job's summary as the browsers receive it.
type liveJob struct {
	messages.JobStatus
	Done int64   `json:"done"`
	Rate float64 `json:"rate"`
}

// flush sends the coalesced updates.
func (h *hub) flush() {
	now := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushes++
	jobFrames := make(map[string][]byte, len(h.pending))
	for id, st := range h.pending {
		lj := liveJob{JobStatus: st, Done: st.Done()}
		if tr := h.jobs[id]; tr != nil {
			lj.Rate = tr.recent(now)
		}
		b, err := json.Marshal(lj)
		if err == nil {
			jobFrames[id] = b
		}
	}
	var seriesFrame []byte
	if h.flushes%seriesEvery == 1 {
		done, retries := h.fleet.rates(now)
		b, _ := json.Marshal(map[string]any{"step_s": seriesStep.Seconds(), "done": done, "retries": retries})
		seriesFrame = sseFrame("series", b)
	}
	var agentsFrame []byte
	for c := range h.clients {
		if len(jobFrames) > 0 && len(c.jobs) > 0 {
			var buf bytes.Buffer
			buf.WriteByte('[')
			n := 0
			for id, b := range jobFrames {
				if c.jobs[id] {
					if n > 0 {
						buf.WriteByte(',')
					}
					buf.Write(b)
					n++
				}
			}
			buf.WriteByte(']')
			if n > 0 {
				h.sendLocked(c, sseFrame("jobs", buf.Bytes()))
			}
		}
		if len(h.events) > 0 && (c.allEvents || len(c.jobs) > 0) {
			var sel []json.RawMessage
			for _, e := range h.events {
				if c.allEvents || c.jobs[e.job] {
					sel = append(sel, e.data)
				}
			}
			if len(sel) > 0 {
				b, _ := json.Marshal(map[string]any{"events": sel, "skipped": h.skipped})
				h.sendLocked(c, sseFrame("events", b))
			}
		}
		if seriesFrame != nil && c.series {
			h.sendLocked(c, seriesFrame)
		}
		if c.agents && c.agentsV != h.agentsV {
			if agentsFrame == nil {
				agentsFrame = sseFrame("agents", h.agentsJSONLocked())
			}
			c.agentsV = h.agentsV
			h.sendLocked(c, agentsFrame)
		}
	}
	clear(h.pending)
	h.events, h.skipped = h.events[:0], 0
	if h.flushes%120 == 0 {
		for id, tr := range h.jobs {
			if now.Sub(tr.seen) > forgetJobAfter {
				delete(h.jobs, id)
			}
		}
	}
}

func (h *hub) agentsJSONLocked() []byte {
	list := make([]messages.AgentPresence, 0, len(h.agents))
	for _, p := range h.agents {
		list = append(list, p)
	}
	b, _ := json.Marshal(list)
	return b
}

// sseFrame formats one server-sent event. data is JSON, so it holds no
// newline that could end the frame early.
func sseFrame(event string, data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(event) + len(data) + 16)
	b.WriteString("event: ")
	b.WriteString(event)
	b.WriteString("\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}

// run feeds the hub from the fleet until ctx ends.
func (h *hub) run(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, names messages.Names) {
	var wg sync.WaitGroup
	keep := func(name string, follow func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := follow(ctx)
				if ctx.Err() != nil {
					return
				}
				h.setSource(name, err)
				h.log.Debug().Err(err).Str("source", name).Msg("live source down; retrying")
				_ = retry.Sleep(ctx, nil, resubscribeDelay)
			}
		}()
	}
	keep("jobs", func(ctx context.Context) error { return h.followJobs(ctx, js, names) })
	keep("events", func(ctx context.Context) error { return h.followEvents(ctx, nc, names) })
	keep("agents", func(ctx context.Context) error { return h.followAgents(ctx, js, names) })
	t := time.NewTicker(h.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			h.closeAll()
			return
		case <-t.C:
			h.flush()
		}
	}
}

// closeAll ends every browser's stream.
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		delete(h.clients, c)
		close(c.ch)
	}
	h.metrics.clients.Set(0)
}

// followJobs watches the jobs bucket for changes (not the initial values:
// pages render those from the API).
func (h *hub) followJobs(ctx context.Context, js jetstream.JetStream, names messages.Names) error {
	kv, err := js.KeyValue(ctx, names.JobsBucket())
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	h.setSource("jobs", nil)
	return kvwatch.Watch(ctx, w, nil, func(e jetstream.KeyValueEntry) {
		var rec struct {
			Status messages.JobStatus `json:"status"`
		}
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Status.ID == e.Key() {
			h.jobUpdate(&rec.Status)
		}
	})
}

// followAgents watches the agents bucket, initial values included.
func (h *hub) followAgents(ctx context.Context, js jetstream.JetStream, names messages.Names) error {
	kv, err := js.KeyValue(ctx, names.AgentsBucket())
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	h.setSource("agents", nil)
	return kvwatch.Watch(ctx, w, nil, func(e jetstream.KeyValueEntry) {
		// Agents' last_seen is compared with this clock: the server's time,
		// learnt from the entries' stamps (docs/design.md, "Clocks").
		clock.Observe(h.cfg.Clock, e.Created())
		if e.Operation() != jetstream.KeyValuePut {
			h.agentUpdate(e.Key(), nil)
			return
		}
		var p messages.AgentPresence
		if json.Unmarshal(e.Value(), &p) == nil {
			h.agentUpdate(e.Key(), &p)
		}
	})
}

// followEvents subscribes to every event (core NATS: what is published
// from now on).
func (h *hub) followEvents(ctx context.Context, nc *nats.Conn, names messages.Names) error {
	sub, err := nc.Subscribe(names.EventsFilter(), func(m *nats.Msg) {
		job, _, _, _ := names.ParseEvent(m.Subject)
		h.event(job, m.Data)
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushTimeout(h.cfg.RequestTimeout); err != nil {
		return err
	}
	h.setSource("events", nil)
	<-ctx.Done()
	return nil
}
