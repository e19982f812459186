package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// dlqForm is a DLQ filter as the forms carry it: the text the visitor
// typed, and the filter it means (relative times resolved).
type dlqForm struct {
	Job, Reason, Class, Signature, Text, Since, Until string
	Filter                                            messages.DLQFilter
}

// Values is the filter as query parameters, with times made absolute, so
// that a replay or purge started from a page acts on exactly what the
// page showed, however long after it was loaded.
func (f dlqForm) Values() url.Values {
	v := url.Values{}
	set := func(k, x string) {
		if x != "" {
			v.Set(k, x)
		}
	}
	set("job", f.Filter.JobID)
	set("reason", f.Filter.Reason)
	set("error_class", f.Filter.ErrorClass)
	set("signature", f.Filter.Signature)
	set("text", f.Filter.Text)
	if !f.Filter.Since.IsZero() {
		v.Set("since", f.Filter.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Filter.Until.IsZero() {
		v.Set("until", f.Filter.Until.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// Fields is Values as a list, for hidden form fields.
func (f dlqForm) Fields() []kvString {
	var out []kvString
	for _, k := range []string{"job", "reason", "error_class", "signature", "text", "since", "until"} {
		if x := f.Values().Get(k); x != "" {
			out = append(out, kvString{k, x})
		}
	}
	return out
}

// URL is the DLQ page of this filter; StatsURL the same with its summary;
// SignatureURL narrows it to one signature.
func (f dlqForm) URL() string { return pageURL("/dlq", f.Values(), nil) }
func (f dlqForm) StatsURL() string {
	return pageURL("/dlq", f.Values(), map[string]string{"stats": "1"})
}
func (f dlqForm) SignatureURL(sig string) string {
	return pageURL("/dlq", f.Values(), map[string]string{"signature": sig})
}

// Empty reports a filter that selects every entry.
func (f dlqForm) Empty() bool { return len(f.Values()) == 0 }

type kvString struct{ Key, Value string }

// parseDLQForm reads a filter from query or form values, as fleetctl dlq
// reads its flags.
func parseDLQForm(v url.Values, now time.Time) (dlqForm, error) {
	f := dlqForm{
		Job: strings.TrimSpace(v.Get("job")), Reason: strings.TrimSpace(v.Get("reason")),
		Class: strings.TrimSpace(v.Get("error_class")), Signature: strings.TrimSpace(v.Get("signature")),
		Text: v.Get("text"), Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until")),
	}
	f.Filter = messages.DLQFilter{JobID: f.Job, Reason: f.Reason, ErrorClass: f.Class, Signature: f.Signature, Text: f.Text}
	var err error
	if f.Filter.Since, err = dlq.ParseTime(f.Since, now); err != nil {
		return f, fmt.Errorf("since: %w", err)
	}
	if f.Filter.Until, err = dlq.ParseTime(f.Until, now); err != nil {
		return f, fmt.Errorf("until: %w", err)
	}
	if err := dlq.ValidateFilter(f.Filter); err != nil {
		return f, err
	}
	return f, nil
}

// dlqData is the DLQ page.
type dlqData struct {
	Form    dlqForm
	Page    *messages.DLQListReply
	After   uint64
	Next    string
	First   string
	Stream  *messages.DLQStreamState
	Stats   *messages.DLQStats
	Reasons []string
	Classes []string
	Now     time.Time
}

var (
	dlqReasons = []string{
		messages.ReasonAttempts, messages.ReasonRetryBudget, messages.ReasonNotRetryable, messages.ReasonPermanent,
		messages.ReasonItemBudget, messages.ReasonJobBudget, messages.ReasonMaxDeliveries, messages.ReasonItemRetryExhausted,
		messages.ReasonCustomFailed, messages.ReasonUnknownHandler, messages.ReasonPoison, messages.ReasonJobGone, messages.ReasonBadSignature,
		messages.ReasonCircuitOpen, messages.ReasonAgentTimeout,
	}
	dlqClasses = []string{"network", "timeout", "server_error", "rate_limit", "error"}
)

func (s *Server) pageDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := s.cfg.Clock.Now()
	form, err := parseDLQForm(q, now)
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	limit, err := intParam(r, "limit", s.cfg.PageSize, 1, MaxPageSize)
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	var after uint64
	if a := q.Get("after"); a != "" {
		if after, err = strconv.ParseUint(a, 10, 64); err != nil {
			s.badRequest(w, r, fmt.Sprintf("after: %q is not a DLQ sequence", a))
			return
		}
	}
	f := form.Filter
	f.Limit, f.AfterSeq = limit, after
	ctx, cancel := s.callCtx(r)
	defer cancel()
	reply, err := s.client.DLQList(ctx, f)
	if err != nil {
		s.fail(w, r, "listing dead letters", err)
		return
	}
	d := &dlqData{Form: form, Page: reply, After: after, Stream: s.dlqState(ctx), Reasons: dlqReasons, Classes: dlqClasses, Now: now}
	base := form.Values()
	if limit != s.cfg.PageSize {
		base.Set("limit", strconv.Itoa(limit))
	}
	if reply.More {
		d.Next = pageURL("/dlq", base, map[string]string{"after": strconv.FormatUint(reply.NextSeq, 10)})
	}
	if after > 0 {
		d.First = pageURL("/dlq", base, nil)
	}
	if q.Get("stats") == "1" {
		if d.Stats, err = s.client.DLQStats(ctx, form.Filter); err != nil {
			s.fail(w, r, "summarising dead letters", err)
			return
		}
	}
	live := ""
	if form.Filter.JobID != "" {
		live = url.Values{"jobs": {form.Filter.JobID}}.Encode()
	}
	s.render(w, r, http.StatusOK, "dlq", &page{Title: "Dead letters", Nav: "dlq", Live: live, Data: d})
}

// entryData is one DLQ entry's page.
type entryData struct {
	Ref      *messages.DLQEntryRef
	Timeline timeline
	Form     dlqForm // selects exactly this entry
}

// exactFilter selects the entry at seq and nothing else: its job's subject
// from that sequence on, its dead-letter time to the nanosecond, one entry.
func exactFilter(ref *messages.DLQEntryRef) dlqForm {
	e := &ref.Entry
	f := messages.DLQFilter{JobID: e.JobID, Since: e.DeadLetteredAt, Until: e.DeadLetteredAt.Add(time.Nanosecond)}
	return dlqForm{Filter: f}
}

func (s *Server) pageEntry(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		s.badRequest(w, r, fmt.Sprintf("%q is not a DLQ sequence", r.PathValue("seq")))
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	ref, err := s.client.DLQGet(ctx, seq)
	if err != nil {
		s.fail(w, r, fmt.Sprintf("dead letter %d", seq), err)
		return
	}
	d := &entryData{Ref: ref, Timeline: attemptTimeline(ref.Entry.Attempts, ref.Entry.DeadLetteredAt), Form: exactFilter(ref)}
	s.render(w, r, http.StatusOK, "entry", &page{Title: fmt.Sprintf("Dead letter %d", seq), Nav: "dlq", Data: d})
}

// planData is a dry run's page: what a replay or purge would touch.
type planData struct {
	Form    dlqForm
	Plan    *messages.DLQReplayStatus
	Purge   bool // the page confirms a purge
	Rate    float64
	Reset   bool
	Seq     uint64 // a single entry's replay
	Total   int64
	MaxRate float64
}

// replayForm reads the filter of a replay or purge form: a single entry
// (seq) or a filter.
func (s *Server) replayForm(r *http.Request) (dlqForm, uint64, error) {
	if v := r.PostForm.Get("seq"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil || seq == 0 {
			return dlqForm{}, 0, fmt.Errorf("seq: %q is not a DLQ sequence", v)
		}
		ctx, cancel := s.callCtx(r)
		defer cancel()
		ref, err := s.client.DLQGet(ctx, seq)
		if err != nil {
			return dlqForm{}, 0, err
		}
		f := exactFilter(ref)
		f.Filter.AfterSeq, f.Filter.Limit = seq-1, 1
		return f, seq, nil
	}
	f, err := parseDLQForm(r.PostForm, s.cfg.Clock.Now())
	return f, 0, err
}

func (s *Server) postReplay(w http.ResponseWriter, r *http.Request) {
	form, seq, err := s.replayForm(r)
	if err != nil {
		s.fail(w, r, "replay", err)
		return
	}
	rate := 0.0
	if v := r.PostForm.Get("rate"); v != "" {
		if rate, err = strconv.ParseFloat(v, 64); err != nil || rate < 0 || rate > dlq.MaxRate {
			s.badRequest(w, r, fmt.Sprintf("rate: %q, want 0 (unpaced) to %v items/s", v, dlq.MaxRate))
			return
		}
	}
	req := messages.DLQReplayRequest{DLQFilter: form.Filter, Rate: rate, ResetAttempts: r.PostForm.Get("reset_attempts") == "1",
		DryRun: r.PostForm.Get("dry_run") == "1"}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	st, err := s.client.DLQReplay(ctx, req)
	if err != nil {
		s.fail(w, r, "replay", err)
		return
	}
	if req.DryRun {
		s.render(w, r, http.StatusOK, "plan", &page{Title: "Replay: dry run", Nav: "dlq", Data: &planData{
			Form: form, Plan: st, Rate: rate, Reset: req.ResetAttempts, Seq: seq, MaxRate: dlq.MaxRate,
		}})
		return
	}
	s.log.Info().Str("replay_id", st.ReplayID).Str("job_id", req.JobID).Int64("matched", st.Matched).Msg("replay started from the dashboard")
	http.Redirect(w, r, "/dlq/replays/"+url.PathEscape(st.ReplayID), http.StatusSeeOther)
}

// purgeData is a purge's result page.
type purgeData struct {
	Form   dlqForm
	Purged int64
}

func (s *Server) postPurge(w http.ResponseWriter, r *http.Request) {
	form, seq, err := s.replayForm(r)
	if err != nil {
		s.fail(w, r, "purge", err)
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if r.PostForm.Get("confirm") != "yes" {
		// First step: say how many entries the purge would delete.
		plan, err := s.client.DLQReplay(ctx, messages.DLQReplayRequest{DLQFilter: form.Filter, DryRun: true})
		if err != nil {
			s.fail(w, r, "purge", err)
			return
		}
		s.render(w, r, http.StatusOK, "plan", &page{Title: "Purge: confirm", Nav: "dlq", Data: &planData{
			Form: form, Plan: plan, Purge: true, Seq: seq, Total: plan.Matched + plan.Skipped,
		}})
		return
	}
	n, err := s.client.DLQPurge(ctx, messages.DLQPurgeRequest{DLQFilter: form.Filter, Confirm: true})
	if err != nil {
		s.fail(w, r, "purge", err)
		return
	}
	s.log.Warn().Int64("purged", n).Str("job_id", form.Filter.JobID).Msg("dead letters purged from the dashboard")
	s.render(w, r, http.StatusOK, "purged", &page{Title: "Purged", Nav: "dlq", Data: &purgeData{Form: form, Purged: n}})
}

// replayData is a replay's progress page.
type replayData struct {
	Status    messages.DLQReplayStatus
	Handled   int64
	Running   bool
	JobURL    string
	FilterURL string
}

func (s *Server) replayStatus(r *http.Request) (*messages.DLQReplayStatus, error) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	list, err := s.client.DLQReplays(ctx, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, &messages.APIError{Code: messages.CodeNotFound, Field: "replay_id", Message: "no such replay"}
	}
	return &list[0], nil
}

func (s *Server) pageReplay(w http.ResponseWriter, r *http.Request) {
	st, err := s.replayStatus(r)
	if err != nil {
		s.fail(w, r, "replay "+r.PathValue("id"), err)
		return
	}
	d := &replayData{Status: *st, Handled: st.Replayed + st.Failed + st.Skipped, Running: st.State == messages.ReplayRunning}
	if st.Filter.JobID != "" {
		d.JobURL = "/jobs/" + url.PathEscape(st.Filter.JobID)
	}
	d.FilterURL = pageURL("/dlq", dlqForm{Filter: st.Filter}.Values(), nil)
	s.render(w, r, http.StatusOK, "replay", &page{Title: "Replay " + st.ReplayID, Nav: "dlq", Data: d})
}

func (s *Server) apiReplay(w http.ResponseWriter, r *http.Request) {
	st, err := s.replayStatus(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(st)
}

func (s *Server) postReplayCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if _, err := s.client.DLQReplayCancel(ctx, id); err != nil {
		s.fail(w, r, "cancelling replay "+id, err)
		return
	}
	http.Redirect(w, r, "/dlq/replays/"+url.PathEscape(id), http.StatusSeeOther)
}
