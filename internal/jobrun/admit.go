package jobrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// What a submission is checked against, through the API and the durable
// intake alike (docs/security.md, "Limits"). Every check refuses with the
// field's path and the bound; none lets a job in that could not be
// written, published, dead-lettered or reported within the server's
// max_payload.
const (
	// maxGroupBytes bounds a group name (a line of the job's status, and
	// the pool its items may be routed to).
	maxGroupBytes = 256
	// maxProblems bounds the problems recorded and returned for one
	// submission; maxProblemBytes one problem's message.
	maxProblems     = 100
	maxProblemBytes = 1024
	// messageRoom is kept under max_payload for headers and protocol.
	messageRoom = 1024
	// workOverhead bounds what a work message adds to an item's payload,
	// id, group and job id: the other fields of its body and its msg id.
	workOverhead = 512
)

// maxPayload is the server's max_payload (1 MiB unless configured).
func (c *Coordinator) maxPayload() int {
	if n := int(c.nc.MaxPayload()); n > 0 {
		return n
	}
	return 1 << 20
}

// maxWorkBytes is the largest work message an item may make: the rest of
// max_payload is kept for its dead-letter entry and its result.
func (c *Coordinator) maxWorkBytes() int { return c.maxPayload() - wire.ItemHeadroom }

// statusRoom is what a job record keeps free, under the server's
// max_payload, for its status to grow into: counts, the error report
// (ErrorSignatures summaries, each bounded), the reduce outcome. An eighth
// of max_payload, from 8 KiB to 64 KiB (64 KiB of the default 1 MiB).
func (c *Coordinator) statusRoom() int { return min(max(c.maxPayload()/8, 8<<10), 64<<10) }

// maxRecordBytes is the most a job record may take when it is created.
func (c *Coordinator) maxRecordBytes() int { return c.maxPayload() - c.statusRoom() }

// admitSpec parses a submission and checks what needs no input: its size,
// and that its record fits. spec is nil when the submission cannot be
// parsed.
func (c *Coordinator) admitSpec(data []byte) (spec *messages.JobSpec, problems []messages.FieldError) {
	if len(data) > c.cfg.MaxSpecBytes {
		return nil, []messages.FieldError{{Message: tooLargeSpec(len(data), c.cfg.MaxSpecBytes)}}
	}
	spec, err := jobspec.Parse(data)
	if err != nil {
		return nil, boundProblems(problemsOf(err))
	}
	if p := c.httpTargetProblems(spec); len(p) > 0 {
		return spec, boundProblems(p)
	}
	rec, err := json.Marshal(wire.JobRecord{Spec: jobspec.WithDefaults(spec)})
	if err != nil {
		return spec, []messages.FieldError{{Message: err.Error()}}
	}
	if len(rec) > c.maxRecordBytes() {
		field := ""
		if len(spec.Items) > 0 {
			field = "items"
		}
		return spec, []messages.FieldError{{Field: field, Message: fmt.Sprintf(
			"the spec takes %d bytes as accepted; the limit is %d (the server's max_payload %d less %d for the job's status): put large item lists in an input file",
			len(rec), c.maxRecordBytes(), c.maxPayload(), c.statusRoom())}}
	}
	return spec, nil
}

func tooLargeSpec(n, limit int) string {
	return fmt.Sprintf("the spec is %d bytes; the limit is %d (--max-spec-bytes): put large item lists in an input file", n, limit)
}

// countItems reads a job's items once, checking each (see itemCheck) and
// the job's limits, and returns their count and groups. problems says why
// the job cannot be accepted; err is a failure to retry (ctx ended).
func (c *Coordinator) countItems(ctx context.Context, eff *messages.JobSpec) (total int64, groups map[string]int64, problems []messages.FieldError, err error) {
	total, groups, err = expand.Count(ctx, eff, c.opener,
		expand.WithMaxItems(c.cfg.MaxItems), expand.WithMaxPathNodes(c.cfg.MaxPathNodes),
		expand.WithMaxGroups(c.cfg.MaxGroups), expand.WithItemCheck(c.itemCheck(eff.ID)))
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, nil, ctx.Err()
		}
		return 0, nil, []messages.FieldError{countProblem(eff, err)}, nil
	}
	return total, groups, nil, nil
}

// itemCheck refuses an item whose work message would not leave room under
// max_payload for its dead-letter entry and result (wire.ItemHeadroom),
// or whose group name is too long.
func (c *Coordinator) itemCheck(job string) func(expand.Item) error {
	limit := c.maxWorkBytes()
	return func(it expand.Item) error {
		if len(it.Group) > maxGroupBytes {
			return fmt.Errorf("group_by gives it the group %s; the limit is %d bytes", wire.ShortID(it.Group), maxGroupBytes)
		}
		if n := workSize(job, it); n > limit {
			return fmt.Errorf("its work message would be %d bytes; the limit is %d (the server's max_payload %d less %d kept for its dead-letter entry and result)",
				n, limit, c.maxPayload(), wire.ItemHeadroom)
		}
		return nil
	}
}

// workSize bounds the size of an item's work message from above.
func workSize(job string, it expand.Item) int {
	return len(it.Raw) + jsonLen(it.ID) + jsonLen(it.Group) + 2*len(job) + workOverhead
}

// jsonLen is the length of s encoded as a JSON string.
func jsonLen(s string) int {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	if plain {
		return len(s) + 2
	}
	b, _ := json.Marshal(s)
	return len(b)
}

// countProblem turns an expansion error into a problem with the field's
// path: items[i] for an inline item, input (with the item's position and
// id) for an item of an input, json_path for the query.
func countProblem(eff *messages.JobSpec, err error) messages.FieldError {
	var ie *expand.ItemError
	if errors.As(err, &ie) {
		if eff.Input == "" {
			return messages.FieldError{Field: "items[" + strconv.FormatInt(ie.Index, 10) + "]", Message: ie.Err.Error()}
		}
		what := "item " + strconv.FormatInt(ie.Index, 10)
		if ie.ID != "" && ie.ID != strconv.FormatInt(ie.Index, 10) {
			what += " (id " + wire.ShortID(ie.ID) + ")"
		}
		return messages.FieldError{Field: "input", Message: what + ": " + ie.Err.Error()}
	}
	field := "items"
	switch {
	case errors.Is(err, expand.ErrJSONPath), errors.Is(err, expand.ErrPathTooCostly):
		field = "json_path"
	case errors.Is(err, expand.ErrTooManyGroups):
		field = "group_by"
	case errors.Is(err, expand.ErrSortTooLarge):
		field = "sort_by"
	case eff.Input != "":
		field = "input"
	}
	return messages.FieldError{Field: field, Message: err.Error()}
}

// boundProblems keeps at most maxProblems problems of at most
// maxProblemBytes each: a record and a reply stay small whatever the
// submission.
func boundProblems(ps []messages.FieldError) []messages.FieldError {
	out := make([]messages.FieldError, 0, min(len(ps), maxProblems+1))
	for i, p := range ps {
		if i == maxProblems {
			out = append(out, messages.FieldError{Message: fmt.Sprintf("… and %d more problems", len(ps)-maxProblems)})
			break
		}
		if len(p.Message) > maxProblemBytes {
			p.Message = p.Message[:maxProblemBytes] + "…"
		}
		if len(p.Field) > maxProblemBytes {
			p.Field = p.Field[:maxProblemBytes] + "…"
		}
		out = append(out, p)
	}
	return out
}

// invalidSpec is the API error for a submission with problems.
func invalidSpec(problems []messages.FieldError) *messages.APIError {
	problems = boundProblems(problems)
	e := &messages.APIError{Code: messages.CodeInvalid, Message: "invalid job spec", Problems: problems}
	if len(problems) > 0 {
		e.Field = problems[0].Field
		e.Message = "invalid job spec: " + problems[0].Error()
		if len(problems) > 1 {
			e.Message += fmt.Sprintf(" (and %d more)", len(problems)-1)
		}
	}
	return e
}

// submissionID is the Nats-Msg-Id of a submission through the API: the job
// id and a digest of the spec, so that an identical resubmission is
// dropped by the jobs stream's duplicate window while a corrected spec for
// an id that was rejected is not. after is the revision of the rejected
// record being replaced (0: none), so a resubmission after a rejection is
// taken in even when the spec is the same (its input file was fixed).
func submissionID(id string, body []byte, after uint64) string {
	sum := sha256.Sum256(body)
	msgID := id + "." + hex.EncodeToString(sum[:8])
	if after > 0 {
		msgID += ".r" + strconv.FormatUint(after, 10)
	}
	return msgID
}

// fitRecord encodes a record that exceeds max by shedding, in order: the
// item ids listed in its error report, the report's least frequent
// signatures (counted in errors_other), the reduce outcome's texts beyond
// 1 KiB, and problems beyond the first ten. Acceptance checks keep the
// rest (spec, groups) within max.
func fitRecord(rec *wire.JobRecord, max int) ([]byte, error) {
	r := *rec
	st := &r.Status
	st.Errors = append([]messages.ErrorSummary(nil), st.Errors...)
	steps := []func() bool{
		func() bool {
			for i := range st.Errors {
				st.Errors[i].Items = nil
			}
			return true
		},
		func() bool {
			if len(st.Errors) == 0 {
				return false
			}
			keep := len(st.Errors) / 2
			for _, e := range st.Errors[keep:] {
				st.ErrorsOther += e.Count
			}
			st.Errors = st.Errors[:keep]
			return true
		},
		func() bool {
			if st.Reduce == nil {
				return false
			}
			rd := *st.Reduce
			rd.Output, rd.Error = tailBytes(rd.Output, 1024), tailBytes(rd.Error, 1024)
			st.Reduce = &rd
			return true
		},
		func() bool {
			if len(st.Problems) <= 10 {
				return false
			}
			n := len(st.Problems)
			st.Problems = append(st.Problems[:10:10], messages.FieldError{Message: fmt.Sprintf("… and %d more problems", n-10)})
			return true
		},
	}
	for i := 0; i < len(steps); {
		if !steps[i]() {
			i++
			continue
		}
		data, err := json.Marshal(&r)
		if err != nil || len(data) <= max {
			return data, err
		}
		if i != 1 { // halving the report repeats until it is gone
			i++
		}
	}
	data, err := json.Marshal(&r)
	if err == nil && len(data) > max {
		err = fmt.Errorf("coordinator: the record of job %s is %d bytes; the server's limit is %d", rec.Status.ID, len(data), max)
	}
	return data, err
}

// tailBytes keeps at most the last n bytes of s.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// itemsAccepted completes the record of a job whose items were counted
// (total, in groups): routes and groups, its budgets, its pools' consumers
// and park streams, best effort. requested is the best_effort the
// submission gave (before defaults). problems says why the job cannot be
// accepted (its record would not fit); err is a failure to retry.
func (c *Coordinator) itemsAccepted(ctx context.Context, requested *messages.BestEffort, rec *wire.JobRecord, total int64, groups map[string]int64, now time.Time) (problems []messages.FieldError, err error) {
	eff := rec.Spec
	rec.Routes = c.routes(ctx, eff, groups)
	if eff.GroupBy != "" {
		rec.Status.Groups = make(map[string]messages.GroupStatus, len(groups))
		for g, n := range groups {
			rec.Status.Groups[g] = messages.GroupStatus{Items: n}
		}
	}
	if size := recordSize(rec); size > c.maxRecordBytes() {
		return []messages.FieldError{{Field: "group_by", Message: fmt.Sprintf(
			"the job's record, with its %d groups, would take %d bytes; the limit is %d (the server's max_payload %d less %d for the job's status)",
			len(groups), size, c.maxRecordBytes(), c.maxPayload(), c.statusRoom())}}, nil
	}
	brec := budget.Effective(eff, total, c.cfg.Budget.settings())
	if err := c.createBudgets(ctx, rec, brec, poolItems(eff.Pool, total, groups, rec.Routes)); err != nil {
		return nil, err
	}
	rec.Status.Budget = brec.Status()
	if err := c.ensurePools(ctx, eff.Pool, rec.Routes); err != nil {
		return nil, err
	}
	if eff.BestEffort != nil {
		if requested == nil { // a setup job's: its defaults were applied at acceptance
			be := *eff.BestEffort
			requested = &be
		}
		clampedBy := c.cfg.BestEffort.Apply(requested, eff.BestEffort) // the operator's defaults and cap
		rec.Status.BestEffort = bestEffortStatus(requested, eff.BestEffort, len(groups))
		rec.Status.BestEffort.ClampedBy = clampedBy
		if eff.BestEffort.Deadline > 0 {
			dl := dueAt(rec, now).Add(eff.BestEffort.Deadline.D()) // from not_before, if later
			rec.Deadline = &dl
			rec.Status.BestEffort.Deadline = &dl
		}
	}
	return nil, nil
}
