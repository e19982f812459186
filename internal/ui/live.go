package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Live-stream settings.
const (
	// maxLiveJobs bounds the jobs one browser follows (a page's worth).
	maxLiveJobs = MaxPageSize
	// keepAlive is how often an idle stream gets a comment, so that proxies
	// keep it open and a dead browser is noticed.
	keepAlive = 20 * time.Second
	// retryMS tells EventSource how long to wait before reconnecting.
	retryMS = 2000
)

// live serves /events: the page's live updates as server-sent events.
// Query: jobs=a,b,c (these jobs' updates and events), events=all (every
// job's events), series=1 (the fleet's throughput), agents=1 (the agents'
// presence).
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "ui: streaming unsupported", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	c := &client{jobs: map[string]bool{}, allEvents: q.Get("events") == "all", series: q.Get("series") == "1", agents: q.Get("agents") == "1"}
	if js := q.Get("jobs"); js != "" {
		for _, id := range strings.Split(js, ",") {
			if messages.ValidToken(id) != nil {
				http.Error(w, fmt.Sprintf("ui: jobs: %q is not a job id", id), http.StatusBadRequest)
				return
			}
			c.jobs[id] = true
		}
		if len(c.jobs) > maxLiveJobs {
			http.Error(w, fmt.Sprintf("ui: jobs: at most %d", maxLiveJobs), http.StatusBadRequest)
			return
		}
	}
	if err := s.hub.subscribe(c); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, errTooManyClients) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer s.hub.unsubscribe(c)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	status := "live"
	if e := s.hub.sourceErrors(); e != "" {
		status = e
	}
	b, _ := json.Marshal(map[string]string{"status": status})
	if _, err := fmt.Fprintf(w, "retry: %d\n\n%s", retryMS, sseFrame("hello", b)); err != nil {
		return
	}
	fl.Flush()
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case frame, ok := <-c.ch:
			if !ok {
				return // dropped (too slow) or the dashboard is stopping
			}
			if _, err := w.Write(frame); err != nil {
				return
			}
			// Write what else is queued before flushing once.
			for more := true; more; {
				select {
				case f, ok := <-c.ch:
					if !ok {
						fl.Flush()
						return
					}
					if _, err := w.Write(f); err != nil {
						return
					}
				default:
					more = false
				}
			}
			fl.Flush()
		case <-t.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
