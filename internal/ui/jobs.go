package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	apiclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// jobsData is the jobs page.
type jobsData struct {
	Filter  messages.ListRequest
	Reply   *messages.ListReply
	Rows    []jobRow
	States  []stateCount
	Next    string // URL of the next page ("" = none)
	First   string // URL of the first page when not on it
	Fleet   barChart
	DLQ     *messages.DLQStreamState
	Agents  int
	LiveErr string
}

// jobRow is one job of the jobs page.
type jobRow struct {
	messages.JobStatus
	Rate     float64
	HasRate  bool
	Segments []segment
}

// stateCount is one state filter with its number of jobs.
type stateCount struct {
	State  string
	Count  int
	Active bool
	URL    string
}

var listStates = []string{
	messages.StateRunning, messages.StatePending, messages.StateScheduled, messages.StatePaused, messages.StateSucceeded, messages.StateFailed,
	messages.StateStopped, messages.StateCancelled, messages.StateRejected,
}

func (s *Server) pageJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(r, "limit", s.cfg.PageSize, 1, MaxPageSize)
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	req := messages.ListRequest{State: q.Get("state"), Pool: q.Get("pool"), Text: q.Get("q"), Cursor: q.Get("cursor"), Limit: limit}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	reply, err := s.client.JobListPage(ctx, req)
	if err != nil {
		s.fail(w, r, "listing jobs", err)
		return
	}
	d := &jobsData{Filter: req, Reply: reply, Agents: len(s.hub.agentList()), LiveErr: s.hub.sourceErrors()}
	ids := make([]string, 0, len(reply.Jobs))
	for i := range reply.Jobs {
		st := &reply.Jobs[i]
		row := jobRow{JobStatus: *st, Segments: stackBar(st)}
		row.Rate, row.HasRate = s.jobRate(st)
		d.Rows = append(d.Rows, row)
		ids = append(ids, st.ID)
	}
	base := url.Values{}
	for k, v := range map[string]string{"pool": req.Pool, "q": req.Text} {
		if v != "" {
			base.Set(k, v)
		}
	}
	if limit != s.cfg.PageSize {
		base.Set("limit", q.Get("limit"))
	}
	all := 0
	for _, n := range reply.States {
		all += n
	}
	d.States = append(d.States, stateCount{State: "all", Count: all, Active: req.State == "", URL: pageURL("/", base, nil)})
	for _, st := range listStates {
		if n := reply.States[st]; n > 0 || st == req.State {
			d.States = append(d.States, stateCount{State: st, Count: n, Active: st == req.State,
				URL: pageURL("/", base, map[string]string{"state": st})})
		}
	}
	if req.State != "" {
		base.Set("state", req.State)
	}
	if reply.NextCursor != "" {
		d.Next = pageURL("/", base, map[string]string{"cursor": reply.NextCursor})
	}
	if req.Cursor != "" {
		d.First = pageURL("/", base, nil)
	}
	done, retries := s.hub.fleetRates()
	d.Fleet = rateChart(done, retries, seriesStep)
	d.DLQ = s.dlqState(ctx)
	live := url.Values{"series": {"1"}, "events": {"all"}}
	if len(ids) > 0 {
		live.Set("jobs", strings.Join(ids, ","))
	}
	s.render(w, r, http.StatusOK, "jobs", &page{Title: "Jobs", Nav: "jobs", Live: live.Encode(), Data: d})
}

// jobRate is a job's throughput: over its whole run once it has ended,
// else over the last minute of updates the dashboard saw.
func (s *Server) jobRate(st *messages.JobStatus) (float64, bool) {
	if messages.TerminalState(st.State) && st.StartedAt != nil && st.FinishedAt != nil {
		el := max(st.FinishedAt.Sub(*st.StartedAt), time.Millisecond)
		return float64(st.Done()) / el.Seconds(), true
	}
	return s.hub.rate(st.ID)
}

// pageURL is path with base's parameters plus (or instead of) extra.
func pageURL(path string, base url.Values, extra map[string]string) string {
	v := url.Values{}
	for k, vs := range base {
		v[k] = append([]string(nil), vs...)
	}
	for k, x := range extra {
		v.Set(k, x)
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// dlqState is the DLQ stream's size (nil when it cannot be read).
func (s *Server) dlqState(ctx context.Context) *messages.DLQStreamState {
	stream, err := s.js.Stream(ctx, s.names.DLQStream())
	if err != nil {
		return nil
	}
	info := stream.CachedInfo()
	st := &messages.DLQStreamState{
		Messages: info.State.Msgs, Bytes: info.State.Bytes, MaxMessages: info.Config.MaxMsgs,
		MaxBytes: info.Config.MaxBytes, MaxAgeMS: info.Config.MaxAge.Milliseconds(),
	}
	if st.MaxMessages > 0 {
		st.FillRatio = float64(st.Messages) / float64(st.MaxMessages)
	}
	if st.MaxBytes > 0 {
		st.FillRatio = max(st.FillRatio, float64(st.Bytes)/float64(st.MaxBytes))
	}
	return st
}

// jobData is one job's page.
type jobData struct {
	Job         *messages.JobStatus
	Segments    []segment
	Rate        float64
	HasRate     bool
	Stats       statsView
	StatsErr    string
	Timeline    barChart
	Steps       []stepCharts
	Breaker     []breakerChange
	BreakerMore bool
	BreakerErr  string
	Groups      []groupRow
	MoreGroups  int
	InFlight    int64
	BudgetRatio float64
	CanCancel   bool
	// CanKill offers to kill the running steps of a job cancelled
	// without kill (they may still run).
	CanKill bool
	// CanPause and CanResume show the pause and resume buttons (pause.go).
	CanPause, CanResume bool
	DLQURL              string
	ErrorsDLQURL        map[string]string
}

// stepCharts are one step's histograms.
type stepCharts struct {
	Step      int
	Items     int64
	Runs      barChart
	Durations barChart
}

// jobID is the {id} of the path, or "" after a bad-request page.
func (s *Server) jobID(w http.ResponseWriter, r *http.Request) string {
	id := r.PathValue("id")
	if err := messages.ValidToken(id); err != nil {
		s.badRequest(w, r, "job id: "+err.Error())
		return ""
	}
	return id
}

func (s *Server) pageJob(w http.ResponseWriter, r *http.Request) {
	id := s.jobID(w, r)
	if id == "" {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	st, err := s.client.JobStatus(ctx, id)
	if err != nil {
		s.fail(w, r, "job "+id, err)
		return
	}
	d := &jobData{Job: st, Segments: stackBar(st), InFlight: max(st.Published-st.Done(), 0)}
	d.Rate, d.HasRate = s.jobRate(st)
	if st.Budget.Total > 0 {
		d.BudgetRatio = min(float64(st.Budget.Consumed)/float64(st.Budget.Total), 1)
	} else if st.Budget.Consumed > 0 || st.Budget.Exhausted {
		d.BudgetRatio = 1
	}
	d.CanCancel = !s.cfg.ReadOnly && !messages.TerminalState(st.State)
	d.CanKill = !s.cfg.ReadOnly && st.MapReason == messages.CompletionCancelled
	d.CanPause, d.CanResume = s.pauseButtons(st)
	d.DLQURL = "/dlq?" + url.Values{"job": {id}}.Encode()
	d.ErrorsDLQURL = map[string]string{}
	for _, e := range st.Errors {
		d.ErrorsDLQURL[e.Signature] = "/dlq?" + url.Values{"job": {id}, "signature": {e.Signature}}.Encode()
	}
	d.Groups = groupList(st.Groups)
	d.MoreGroups = max(len(st.Groups)-len(d.Groups), 0)

	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	var start time.Time
	if st.StartedAt != nil {
		start = *st.StartedAt
	}
	d.Stats, err = s.stats.get(sctx, id, start)
	scancel()
	if err != nil {
		d.StatsErr = err.Error()
	}
	d.Timeline = timelineChart(d.Stats)
	for i, h := range d.Stats.Steps {
		d.Steps = append(d.Steps, stepCharts{
			Step: i, Items: h.Items,
			Runs:      histogram(halfWidth, h.Runs[:], runsLabels(), "runs", "items"),
			Durations: histogram(halfWidth, h.Durations, durationLabels(), "dur", "items"),
		})
	}
	if st.Breaker != nil {
		bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
		d.Breaker, d.BreakerMore, err = breakerHistory(bctx, s.js, s.names, id)
		bcancel()
		if err != nil {
			d.BreakerErr = err.Error()
		}
	}
	live := url.Values{"jobs": {id}}
	s.render(w, r, http.StatusOK, "job", &page{Title: "Job " + id, Nav: "jobs", Live: live.Encode(), Data: d})
}

// postCancel cancels the job; with the form's kill=1 its running steps
// are terminated too (client.WithKill).
func (s *Server) postCancel(w http.ResponseWriter, r *http.Request) {
	id := s.jobID(w, r)
	if id == "" {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	var opts []apiclient.CancelOption
	kill := r.PostFormValue("kill") == "1"
	if kill {
		opts = append(opts, apiclient.WithKill())
	}
	if _, err := s.client.JobCancel(ctx, id, opts...); err != nil {
		s.fail(w, r, "cancelling job "+id, err)
		return
	}
	s.log.Info().Str("job_id", id).Bool("kill", kill).Msg("job cancelled from the dashboard")
	http.Redirect(w, r, "/jobs/"+url.PathEscape(id), http.StatusSeeOther)
}
