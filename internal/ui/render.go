package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/chart"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/version"
	apiclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// page is what every template gets: the layout's fields and the page's
// own data.
type page struct {
	Title    string
	Nav      string // jobs, dlq, agents, limits
	ReadOnly bool
	CSRF     string
	// Live is the query of the page's live stream (/events?...), "" for none.
	Live   string
	Notice string
	Now    time.Time
	// Build is the dashboard's own build (internal/version).
	Build string
	Data  any
}

// dashboardBuild is the build the dashboard's footer names.
var dashboardBuild = version.Get().String()

// render writes template name with p.
func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name string, p *page) {
	p.ReadOnly = s.cfg.ReadOnly
	p.CSRF = s.guard.token(s.guard.session(w, r))
	p.Now = s.cfg.Clock.Now()
	p.Build = dashboardBuild
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.log.Error().Err(err).Str("page", name).Msg("template failed")
		http.Error(w, "ui: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// failure is an error page's data.
type failure struct {
	Message string
	Hint    string
}

// fail renders an error page for a failed call to the fleet.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	code := http.StatusBadGateway
	f := failure{Message: what + ": " + err.Error()}
	var ae *messages.APIError
	switch {
	case errors.As(err, &ae):
		switch ae.Code {
		case messages.CodeNotFound:
			code = http.StatusNotFound
		case messages.CodeBadRequest, messages.CodeInvalid:
			code = http.StatusBadRequest
		case messages.CodeConflict:
			code = http.StatusConflict
		case messages.CodeStoreFull:
			code = http.StatusInsufficientStorage
			f.Hint = "JetStream has no room left (max_file_store or the account's limit): no coordinator can lead, and the jobs wait. " +
				"Make room and they go on (docs/deploy.md, \"A full store\")."
		}
	case errors.Is(err, apiclient.ErrNoCoordinator):
		code = http.StatusServiceUnavailable
		f.Hint = "No coordinator answers on this prefix. Is one running, and is the dashboard's --prefix right?"
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
		f.Hint = "The fleet did not answer in time."
	}
	if d := s.lastDenied(); d != "" {
		f.Hint = strings.TrimSpace(f.Hint + " NATS refused this connection an operation: " + d +
			". The dashboard acts with its own credentials; an operator's are needed to replay, purge and cancel.")
	}
	s.render(w, r, code, "error", &page{Title: "Error", Data: f})
}

// badRequest renders an error page for a request the dashboard refuses.
func (s *Server) badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	s.render(w, r, http.StatusBadRequest, "error", &page{Title: "Bad request", Data: failure{Message: msg}})
}

// funcs are the templates' helpers. None returns unescaped HTML: every
// value coming from the fleet (item ids, payloads, error texts) is
// attacker-controlled and goes through html/template's escaping.
var funcs = template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		if d := now.Sub(t); d >= 0 {
			return shortDuration(d.Round(time.Second)) + " ago"
		}
		return "in " + shortDuration(t.Sub(now).Round(time.Second))
	},
	"agop": func(now time.Time, t *time.Time) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		return shortDuration(now.Sub(*t).Round(time.Second)) + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"dur": func(ms int64) string {
		if ms == 0 {
			return "<1ms"
		}
		return shortDuration(time.Duration(ms) * time.Millisecond)
	},
	"elapsed": func(now time.Time, st *messages.JobStatus) string {
		if st.StartedAt == nil {
			return "—"
		}
		end := now
		if st.FinishedAt != nil {
			end = *st.FinishedAt
		}
		d := end.Sub(*st.StartedAt)
		return shortDuration(roundSpan(d, d))
	},
	"num": thousands,
	"pct": func(a, b int64) string {
		if b <= 0 {
			return "0%"
		}
		return strconv.FormatFloat(100*float64(a)/float64(b), 'f', 0, 64) + "%"
	},
	"ratio": func(a, b int) float64 {
		if b <= 0 {
			return 0
		}
		return min(float64(a)/float64(b), 1)
	},
	"rate":   func(r float64) string { return rateText(r) },
	"short":  func(s string, n int) string { return oneLine(s, n) },
	"f1":     func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"f2":     func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"pretty": func(raw json.RawMessage) string { return prettyJSON(raw) },
	"stateClass": func(s string) string {
		switch s {
		case messages.StateSucceeded:
			return "ok"
		case messages.StateFailed, messages.StateRejected:
			return "fail"
		case messages.StateStopped, messages.StateCancelled, messages.StatePaused:
			return "warn"
		case messages.StateRunning:
			return "run"
		}
		return "idle"
	},
	"terminal":  messages.TerminalState,
	"stackBar":  stackBar,
	"classTok":  classToken,
	"pathEsc":   url.PathEscape,
	"decode":    decodeItemID,
	"sortedKV":  sortedCounts,
	"add":       func(a, b int) int { return a + b },
	"sub64":     func(a, b int64) int64 { return a - b },
	"exitCode":  func(p *int) string { return exitText(p) },
	"groupList": groupList,
	"u64":       func(n uint64) int64 { return int64(n) },
	"pctf":      func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" },
	"mul100":    func(f float64) float64 { return 100 * f },
	"i64":       func(n int) int64 { return int64(n) },
}

// thousands prints n with thin separators: 1 234 567.
func thousands(n int64) string { return chart.FormatCount(n, "\u202f") }

func exitText(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}

func decodeItemID(s string) string {
	id, err := messages.DecodeItemID(s)
	if err != nil {
		return s
	}
	return id
}

// kv is one count of a map, for sorted tables.
type kv struct {
	Key   string
	Count int64
}

// sortedCounts is m by count, largest first (ties by key).
func sortedCounts(m map[string]int64) []kv {
	out := make([]kv, 0, len(m))
	for _, k := range dlq.Top(m) {
		out = append(out, kv{k, m[k]})
	}
	return out
}

// groupRow is one best-effort group for the job page.
type groupRow struct {
	Name string
	messages.GroupStatus
	Complete bool
}

// maxGroupRows bounds the groups a job page lists.
const maxGroupRows = 200

// groupList is the job's groups, incomplete first, then by name; at most
// maxGroupRows of them.
func groupList(gs map[string]messages.GroupStatus) []groupRow {
	out := make([]groupRow, 0, len(gs))
	for name, g := range gs {
		out = append(out, groupRow{Name: name, GroupStatus: g, Complete: g.Complete()})
	}
	slices.SortFunc(out, func(a, b groupRow) int {
		if a.Complete != b.Complete {
			if a.Complete {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > maxGroupRows {
		out = out[:maxGroupRows]
	}
	return out
}

// intParam reads a bounded integer query parameter (def when absent).
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: %q, want a number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}
