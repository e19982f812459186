package ui

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/clock"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func testHub(t *testing.T, buffer int) (*hub, *metrics, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := Config{ClientBuffer: buffer, Clock: clk}.WithDefaults()
	m := newMetrics(prometheus.NewRegistry())
	return newHub(cfg, zerolog.Nop(), m), m, clk
}

func status(id string, done int64, retries int64) *messages.JobStatus {
	return &messages.JobStatus{ID: id, State: messages.StateRunning, Items: 1000, Published: 1000, Succeeded: done, Retries: retries,
		Groups: map[string]messages.GroupStatus{"g": {Items: 1000}}}
}

// A browser that does not read is disconnected once its queue is full;
// the others keep receiving, and nothing blocks.
func TestHubDropsASlowClientAndNeverBlocks(t *testing.T) {
	h, m, _ := testHub(t, 2)
	slow := &client{jobs: map[string]bool{"a": true}}
	fast := &client{jobs: map[string]bool{"a": true}}
	require.NoError(t, h.subscribe(slow))
	require.NoError(t, h.subscribe(fast))
	for i := range 10 {
		h.jobUpdate(status("a", int64(i), 0))
		done := make(chan struct{})
		go func() { h.flush(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("flush blocked on a slow browser")
		}
		frame := <-fast.ch
		require.Contains(t, string(frame), fmt.Sprintf(`"succeeded":%d`, i))
	}
	// The slow one got two frames, then its stream was closed.
	n := 0
	for range slow.ch {
		n++
	}
	require.Equal(t, 2, n)
	require.Equal(t, 1.0, value(t, m.dropped))
	require.Equal(t, 1.0, value(t, m.clients))
	h.unsubscribe(slow) // after a drop: no double close
	h.unsubscribe(fast)
	require.Equal(t, 0.0, value(t, m.clients))
}

// Updates are coalesced per flush, filtered per browser, and summarised.
func TestHubCoalescesAndFilters(t *testing.T) {
	h, _, clk := testHub(t, 8)
	c := &client{jobs: map[string]bool{"a": true}}
	all := &client{allEvents: true, series: true}
	require.NoError(t, h.subscribe(c))
	require.NoError(t, h.subscribe(all))
	h.jobUpdate(status("a", 0, 0)) // baseline
	for i := 1; i <= 5; i++ {
		clk.Advance(time.Second)
		h.jobUpdate(status("a", int64(10*i), int64(i)))
		h.jobUpdate(status("b", int64(i), 0))
	}
	for i := range 3 * maxEventsPerFlush {
		h.event("a", []byte(fmt.Sprintf(`{"type":"ItemFailed","job_id":"a","n":%d}`, i)))
	}
	h.event("b", []byte(`not json`))
	h.flush()

	frame := string(<-c.ch)
	require.True(t, strings.HasPrefix(frame, "event: jobs\ndata: "), frame)
	var jobs []liveJob
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(frame, "event: jobs\ndata: "))), &jobs))
	require.Len(t, jobs, 1, "one update per job per flush, and only the jobs asked for")
	require.EqualValues(t, 50, jobs[0].Succeeded)
	require.EqualValues(t, 50, jobs[0].Done)
	require.Nil(t, jobs[0].Groups, "summaries only")
	frame = string(<-c.ch)
	require.True(t, strings.HasPrefix(frame, "event: events\n"), frame)
	var evs struct {
		Events  []json.RawMessage
		Skipped int
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(frame, "event: events\ndata: "))), &evs))
	require.Len(t, evs.Events, maxEventsPerFlush)
	require.Equal(t, 2*maxEventsPerFlush+1, evs.Skipped)

	// The browser of every event gets events and the series, no job frames.
	frame = string(<-all.ch)
	require.True(t, strings.HasPrefix(frame, "event: events\n"), frame)
	frame = string(<-all.ch)
	require.True(t, strings.HasPrefix(frame, "event: series\n"), frame)
	select {
	case f := <-all.ch:
		t.Fatalf("unexpected frame %s", f)
	default:
	}

	// Throughput: 50 items of a and 4 of b (b's first update is its
	// baseline) in the last 5 seconds, a's 5 retries.
	done, retries := h.fleetRates()
	var sd, sr float64
	for i := range done {
		sd += done[i] * seriesStep.Seconds()
		sr += retries[i] * seriesStep.Seconds()
	}
	require.InDelta(t, 54, sd, 1e-9)
	require.InDelta(t, 5, sr, 1e-9)
	clk.Advance(seriesStep)
	r, ok := h.rate("a")
	require.True(t, ok)
	require.Greater(t, r, 0.0)

	// A flush with nothing new sends nothing.
	h.flush()
	select {
	case f := <-c.ch:
		t.Fatalf("unexpected frame %s", f)
	default:
	}
}

func TestHubRefusesTooManyClients(t *testing.T) {
	h, _, _ := testHub(t, 1)
	h.cfg.MaxClients = 1
	require.NoError(t, h.subscribe(&client{}))
	require.ErrorIs(t, h.subscribe(&client{}), errTooManyClients)
}

func TestSeriesSlides(t *testing.T) {
	s := newSeries(time.Second, 4)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s.add(t0, 1, 0)
	s.add(t0.Add(1500*time.Millisecond), 2, 1)
	s.add(t0.Add(3*time.Second), 4, 0)
	done, retries := s.rates(t0.Add(3 * time.Second))
	require.Equal(t, []float64{1, 2, 0, 4}, done)
	require.Equal(t, []float64{0, 1, 0, 0}, retries)
	done, _ = s.rates(t0.Add(5 * time.Second))
	require.Equal(t, []float64{0, 4, 0, 0}, done, "old buckets slide out")
	done, _ = s.rates(t0.Add(time.Hour))
	require.Equal(t, []float64{0, 0, 0, 0}, done)
}

func TestConfigRefusesRemoteUnlessAllowed(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr error
	}{
		{"default loopback", Config{}, nil},
		{"localhost", Config{Addr: "localhost:9000"}, nil},
		{"ipv6 loopback", Config{Addr: "[::1]:9000"}, nil},
		{"all interfaces", Config{Addr: ":8080"}, ErrRemoteListen},
		{"a LAN address", Config{Addr: "10.0.0.5:8080"}, ErrRemoteListen},
		{"allowed", Config{Addr: "0.0.0.0:8080", AllowRemote: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.WithDefaults().Validate()
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
	require.Error(t, Config{PageSize: MaxPageSize + 1}.WithDefaults().Validate())
}

// value reads a gauge's or counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
