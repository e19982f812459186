package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jetfleet/jetfleet/internal/jsonscan"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Decoding of the two messages every item costs: the agent reads a work
// message, the coordinator a result. encoding/json's reflection was the
// largest part of both processes' CPU per item, so these walk the object's
// members and set the fields directly. What they do not handle plainly
// (escaped or non-ASCII strings, null, a field name in other case,
// anything unexpected) they leave to encoding/json, field by field or for
// the whole message, so that the result is always what json.Unmarshal
// gives (the fuzz tests compare them).

// trimJSONSpace trims what JSON counts as space (bytes.TrimSpace trims
// more).
func trimJSONSpace(b []byte) []byte {
	return bytes.TrimRight(bytes.TrimLeft(b, " \t\r\n"), " \t\r\n")
}

// errSlowPath says: decode this message with json.Unmarshal instead.
var errSlowPath = errors.New("messages: decoded by encoding/json")

// members calls fn with the name (unquoted) and value of every member of
// the object that starts at obj[0], and returns the index just past it. It
// checks the object's structure strictly (every value fn sees is checked
// by fn: a field's parser, json.Unmarshal or json.Valid), and ends with
// errSlowPath at anything it does not read plainly: a malformed object, a
// name with escapes or control characters.
func members(obj []byte, fn func(name, value []byte) error) (int, error) {
	i := jsonscan.SkipSpace(obj, 1)
	if i < len(obj) && obj[i] == '}' {
		return i + 1, nil
	}
	for i < len(obj) && obj[i] == '"' {
		end := jsonscan.SkipString(obj, i)
		if end > len(obj) || obj[end-1] != '"' || end-i < 2 {
			return 0, errSlowPath
		}
		name := obj[i+1 : end-1]
		for _, c := range name {
			if c < 0x20 || c == '\\' {
				return 0, errSlowPath
			}
		}
		i = jsonscan.SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return 0, errSlowPath
		}
		i = jsonscan.SkipSpace(obj, i+1)
		vend := jsonscan.SkipValue(obj, i)
		if vend <= i || vend > len(obj) {
			return 0, errSlowPath
		}
		if err := fn(name, obj[i:vend]); err != nil {
			return 0, err
		}
		i = jsonscan.SkipSpace(obj, vend)
		switch {
		case i >= len(obj):
			return 0, errSlowPath
		case obj[i] == '}':
			return i + 1, nil
		case obj[i] == ',':
			i = jsonscan.SkipSpace(obj, i+1)
		default:
			return 0, errSlowPath
		}
	}
	return 0, errSlowPath
}

// object decodes the object that is all of data (with members) and checks
// that nothing follows it.
func object(data []byte, fn func(name, value []byte) error) error {
	end, err := members(data, fn)
	if err == nil && end != len(data) {
		err = errSlowPath
	}
	return err
}

// unknownMember checks the value of a member no field takes: encoding/json
// ignores it, once it is valid JSON, unless its name is a field's in
// another case.
func unknownMember(name, v []byte, fields []string) error {
	if otherCase(name, fields) || !jsonscan.Valid(v) {
		return errSlowPath
	}
	return nil
}

// otherCase reports whether name is one of names in another case, which
// encoding/json would match to that field.
func otherCase(name []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

// setSchema sets *dst to the JSON number v.
func setSchema(v []byte, dst *messages.Schema) error {
	if n, ok := smallInt(v); ok {
		*dst = messages.Schema(n)
		return nil
	}
	return json.Unmarshal(v, dst)
}

// setString sets *dst to the JSON string v.
func setString(v []byte, dst *string) error {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		if s := v[1 : len(v)-1]; plainString(s) {
			*dst = string(s)
			return nil
		}
	}
	return json.Unmarshal(v, dst)
}

// setStringAs is setString that reuses same when v is that string: no
// copy for a value that repeats.
func setStringAs(v []byte, dst *string, same string) error {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && len(v)-2 == len(same) {
		if s := v[1 : len(v)-1]; string(s) == same && plainString(s) {
			*dst = same
			return nil
		}
	}
	return setString(v, dst)
}

// plainString reports whether s, between quotes, is a JSON string that
// means itself: printable ASCII without escapes.
func plainString(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '\\' || c == '"' {
			return false
		}
	}
	return true
}

// setInt64 sets *dst to the JSON integer v.
func setInt64(v []byte, dst *int64) error {
	if n, ok := smallInt(v); ok {
		*dst = n
		return nil
	}
	return json.Unmarshal(v, dst)
}

// setInt sets *dst to the JSON integer v.
func setInt(v []byte, dst *int) error {
	if n, ok := smallInt(v); ok {
		*dst = int(n)
		return nil
	}
	return json.Unmarshal(v, dst)
}

// smallInt reads an integer of at most 9 digits, which fits an int on
// every platform; longer ones go the slow way.
func smallInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	d := v
	if neg {
		d = v[1:]
	}
	if len(d) == 0 || len(d) > 9 || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	var n int64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// resultFields are Result's JSON names.
var resultFields = []string{"v", "job_id", "item_id", "index", "group", "outcome", "generation", "attempts", "retries", "item_runs", "reason",
	"error", "error_class", "signature", "output", "phase", "agent", "finished_at", "duration_ms", "steps", "setup"}

// decodeResult decodes obj, a JSON object, into r (zero).
func decodeResult(obj []byte, r *messages.Result) error {
	return object(obj, func(name, v []byte) error { return resultMember(r, nil, name, v) })
}

// resultMember sets the field of r that the member name: v is. prev, when
// not nil, is the result before r in the same batch: the fields that
// repeat from one result to the next (the job, the outcome, the agent)
// take its strings instead of new copies.
func resultMember(r, prev *messages.Result, name, v []byte) error {
	switch string(name) {
	case "v":
		return setSchema(v, &r.V)
	case "job_id":
		if prev != nil {
			return setStringAs(v, &r.JobID, prev.JobID)
		}
		return setString(v, &r.JobID)
	case "item_id":
		return setString(v, &r.ItemID)
	case "index":
		return setInt64(v, &r.Index)
	case "group":
		if prev != nil {
			return setStringAs(v, &r.Group, prev.Group)
		}
		return setString(v, &r.Group)
	case "outcome":
		if prev != nil {
			return setStringAs(v, &r.Outcome, prev.Outcome)
		}
		return setString(v, &r.Outcome)
	case "generation":
		return setInt(v, &r.Generation)
	case "attempts":
		return setInt(v, &r.Attempts)
	case "retries":
		return setInt(v, &r.Retries)
	case "item_runs":
		return setInt(v, &r.ItemRuns)
	case "reason":
		if prev != nil {
			return setStringAs(v, &r.Reason, prev.Reason)
		}
		return setString(v, &r.Reason)
	case "error":
		return setString(v, &r.Error)
	case "error_class":
		if prev != nil {
			return setStringAs(v, &r.ErrorClass, prev.ErrorClass)
		}
		return setString(v, &r.ErrorClass)
	case "signature":
		return setString(v, &r.Signature)
	case "output":
		return setString(v, &r.Output)
	case "phase":
		if prev != nil {
			return setStringAs(v, &r.Phase, prev.Phase)
		}
		return setString(v, &r.Phase)
	case "agent":
		if prev != nil {
			return setStringAs(v, &r.Agent, prev.Agent)
		}
		return setString(v, &r.Agent)
	case "finished_at":
		if v[0] != '"' {
			return errSlowPath
		}
		return r.FinishedAt.UnmarshalJSON(v)
	case "duration_ms":
		return setInt64(v, &r.DurationMS)
	case "steps":
		return json.Unmarshal(v, &r.Steps)
	case "setup":
		return json.Unmarshal(v, &r.Setup)
	}
	return unknownMember(name, v, resultFields)
}

// decodeResultsFast is DecodeResults for data (trimmed, starting with '{'
// or '['); any error means: decode it with encoding/json.
func decodeResultsFast(data []byte, into []messages.Result) ([]messages.Result, error) {
	if data[0] == '{' {
		into = append(into, messages.Result{})
		return into, decodeResult(data, &into[0])
	}
	i := jsonscan.SkipSpace(data, 1)
	if i < len(data) && data[i] == ']' {
		if i+1 != len(data) {
			return into, errSlowPath
		}
		return into, nil
	}
	first := len(into) // the batch's first result
	for i < len(data) && data[i] == '{' {
		into = append(into, messages.Result{})
		r := &into[len(into)-1]
		var prev *messages.Result
		if len(into) > first+1 {
			prev = &into[len(into)-2]
		}
		end, err := members(data[i:], func(name, v []byte) error { return resultMember(r, prev, name, v) })
		if err != nil {
			return into, err
		}
		i = jsonscan.SkipSpace(data, i+end)
		switch {
		case i >= len(data):
			return into, errSlowPath
		case data[i] == ']':
			if i+1 != len(data) {
				return into, errSlowPath
			}
			return into, nil
		case data[i] == ',':
			i = jsonscan.SkipSpace(data, i+1)
		default:
			return into, errSlowPath
		}
	}
	return into, errSlowPath
}

// workItemFields are WorkItem's JSON names.
var workItemFields = []string{"v", "job_id", "item_id", "index", "group", "payload", "generation", "correlation_id", "replay_count",
	"history", "history_dropped", "reset_attempts", "phase", "reduce", "park", "held", "sig"}

// DecodeWorkItem decodes a work message into wi, as json.Unmarshal into a
// zero WorkItem does, faster. wi's payload and strings share data's memory
// (the strings through one copy of it), so data must not change while wi
// is in use: a delivered message's data is its own.
func DecodeWorkItem(data []byte, wi *WorkItem) error {
	*wi = WorkItem{}
	t := trimJSONSpace(data)
	if len(t) > 0 && t[0] == '{' && decodeWorkItem(t, wi) == nil {
		return nil
	}
	*wi = WorkItem{}
	return json.Unmarshal(data, wi)
}

func decodeWorkItem(obj []byte, wi *WorkItem) error {
	// One string for the whole message, of which each plain string field
	// is a piece: one allocation per message instead of one per field.
	src := string(obj)
	str := func(v []byte, dst *string) error {
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			// v is obj[i:j], so cap(v) = cap(obj) - i.
			if i := cap(obj) - cap(v); i >= 0 && i+len(v) <= len(src) && plainString(v[1:len(v)-1]) {
				if s := src[i+1 : i+len(v)-1]; s == string(v[1:len(v)-1]) {
					*dst = s
					return nil
				}
			}
		}
		return setString(v, dst)
	}
	return object(obj, func(name, v []byte) error {
		switch string(name) {
		case "v":
			return setSchema(v, &wi.V)
		case "job_id":
			return str(v, &wi.JobID)
		case "item_id":
			return str(v, &wi.ItemID)
		case "index":
			return setInt64(v, &wi.Index)
		case "group":
			return str(v, &wi.Group)
		case "payload":
			if v[0] == 'n' || !jsonscan.Valid(v) {
				return errSlowPath
			}
			wi.Payload = json.RawMessage(v[:len(v):len(v)])
			return nil
		case "generation":
			return setInt(v, &wi.Generation)
		case "correlation_id":
			return str(v, &wi.CorrelationID)
		case "replay_count":
			return setInt(v, &wi.ReplayCount)
		case "history":
			return json.Unmarshal(v, &wi.History)
		case "history_dropped":
			return setInt(v, &wi.HistoryDropped)
		case "reset_attempts":
			return json.Unmarshal(v, &wi.ResetAttempts)
		case "phase":
			return str(v, &wi.Phase)
		case "reduce":
			return json.Unmarshal(v, &wi.Reduce)
		case "park":
			return setInt(v, &wi.Park)
		case "held":
			return setInt(v, &wi.Held)
		case "sig":
			return str(v, &wi.Sig)
		}
		return unknownMember(name, v, workItemFields)
	})
}

// appendResult appends json.Marshal(r), byte for byte, when that is easy
// to be sure of: every string plain (printable ASCII with nothing to
// escape, for JSON or for HTML), no steps and no setup output. ok is false
// otherwise, and nothing is appended.
func appendResult(b []byte, r *messages.Result) (_ []byte, ok bool) {
	if len(r.Steps) > 0 || r.Setup != nil || !plainJSONString(r.JobID) || !plainJSONString(r.ItemID) || !plainJSONString(r.Group) ||
		!plainJSONString(r.Outcome) || !plainJSONString(r.Reason) || !plainJSONString(r.Error) ||
		!plainJSONString(r.ErrorClass) || !plainJSONString(r.Signature) || !plainJSONString(r.Output) ||
		!plainJSONString(r.Phase) || !plainJSONString(r.Agent) {
		return b, false
	}
	if !jsonTimeOK(r.FinishedAt) {
		return b, false
	}
	b = append(b, `{"v":`...)
	b = appendSchema(b, r.V)
	b = append(b, `,"job_id":"`...)
	b = append(b, r.JobID...)
	b = append(b, '"')
	b = appendStrField(b, "item_id", r.ItemID, false)
	b = appendIntField(b, "index", r.Index)
	b = appendStrField(b, "group", r.Group, true)
	b = appendStrField(b, "outcome", r.Outcome, false)
	b = appendIntField(b, "generation", int64(r.Generation))
	b = appendIntField(b, "attempts", int64(r.Attempts))
	b = appendIntField(b, "retries", int64(r.Retries))
	if r.ItemRuns != 0 {
		b = appendIntField(b, "item_runs", int64(r.ItemRuns))
	}
	b = appendStrField(b, "reason", r.Reason, true)
	b = appendStrField(b, "error", r.Error, true)
	b = appendStrField(b, "error_class", r.ErrorClass, true)
	b = appendStrField(b, "signature", r.Signature, true)
	b = appendStrField(b, "output", r.Output, true)
	b = appendStrField(b, "phase", r.Phase, true)
	b = appendStrField(b, "agent", r.Agent, true)
	b = append(b, `,"finished_at":`...)
	b = appendJSONTime(b, r.FinishedAt)
	b = appendIntField(b, "duration_ms", r.DurationMS)
	return append(b, '}'), true
}

// appendSchema appends v as messages.Schema.MarshalJSON writes it.
func appendSchema(b []byte, v messages.Schema) []byte {
	if v == 0 {
		v = messages.SchemaVersion
	}
	return strconv.AppendInt(b, int64(v), 10)
}

// appendStrField appends `,"name":"v"` (v plain), or nothing for an empty
// v when omitEmpty. Plain functions rather than closures over b: a closure
// that appends to b moves b to the heap on every call.
func appendStrField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// appendIntField appends `,"name":v`.
func appendIntField(b []byte, name string, v int64) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it, without
// its allocation (callers checked jsonTimeOK).
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// jsonTimeOK reports whether appendJSONTime writes what MarshalJSON does:
// a four-digit year and an offset in whole minutes (MarshalJSON refuses
// other years; RFC3339Nano is its format).
func jsonTimeOK(t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off%60 == 0 && off > -24*3600 && off < 24*3600
}

// plainJSONString reports whether json.Marshal writes s as itself in
// quotes.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendWorkItem appends json.Marshal(wi), byte for byte, when that is
// easy to be sure of: an item as the coordinator first publishes it (no
// history, replay or reduce fields) whose strings are plain and whose
// payload has nothing json.Marshal would rewrite. That is the usual case,
// and writing it directly spared the coordinator's publishing a fifth of
// its CPU. ok is false otherwise, and nothing is appended.
func appendWorkItem(b []byte, wi *WorkItem) (_ []byte, ok bool) {
	if wi.Generation != 0 || wi.ReplayCount != 0 || len(wi.History) > 0 || wi.HistoryDropped != 0 || wi.ResetAttempts ||
		wi.Phase != "" || wi.Reduce != nil || wi.Park != 0 || wi.Held != 0 || !plainJSONString(wi.JobID) || !plainJSONString(wi.ItemID) ||
		!plainJSONString(wi.Group) || !plainJSONString(wi.CorrelationID) || !plainJSONString(wi.Sig) || !compactPayload(wi.Payload) {
		return b, false
	}
	b = append(b, `{"v":`...)
	b = appendSchema(b, wi.V)
	b = append(b, `,"job_id":"`...)
	b = append(b, wi.JobID...)
	b = append(b, `","item_id":"`...)
	b = append(b, wi.ItemID...)
	b = append(b, `","index":`...)
	b = strconv.AppendInt(b, wi.Index, 10)
	if wi.Group != "" {
		b = append(b, `,"group":"`...)
		b = append(b, wi.Group...)
		b = append(b, '"')
	}
	b = append(b, `,"payload":`...)
	b = append(b, wi.Payload...)
	b = append(b, `,"generation":0,"correlation_id":"`...)
	b = append(b, wi.CorrelationID...)
	if wi.Sig != "" {
		b = append(b, `","sig":"`...)
		b = append(b, wi.Sig...)
	}
	return append(b, `"}`...), true
}

// compactPayload reports whether json.Marshal writes raw as it is, raw
// being valid JSON (the coordinator's input decoder hands over nothing
// else): no space to compact, nothing to escape for HTML or U+2028/9.
// Anything else goes through json.Marshal, which also checks it.
func compactPayload(raw []byte) bool {
	if len(raw) == 0 || !jsonscan.Valid(raw) {
		return false
	}
	for _, c := range raw {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendItemState appends json.Marshal(st), byte for byte, when that is
// easy to be sure of: every string plain, every time writable by
// appendJSONTime, and no captures. That is a retried item's usual state,
// and json.Marshal of it was a tenth of an agent's CPU in a job of flaky
// items (docs/benchmarks.md). ok is false otherwise, and nothing is
// appended.
func appendItemState(b []byte, st *ItemState) (_ []byte, ok bool) {
	if len(st.Captures) > 0 || !plainJSONString(st.JobID) || !plainJSONString(st.ItemID) || !plainJSONString(st.Final) ||
		!plainJSONString(st.Reason) || !plainJSONString(st.Error) || !plainJSONString(st.ErrorClass) ||
		!jsonTimeOK(st.StepFirstFailure) || !jsonTimeOK(st.StartedAt) || !jsonTimeOK(st.FirstFailure) || !jsonTimeOK(st.ParkUntil) {
		return b, false
	}
	for _, o := range st.Outputs {
		if !plainJSONString(o) {
			return b, false
		}
	}
	for i := range st.History {
		h := &st.History[i]
		if !plainJSONString(h.StepName) || !plainJSONString(h.Agent) || !plainJSONString(h.ErrorClass) ||
			!plainJSONString(h.Message) || !plainJSONString(h.Decision) || !jsonTimeOK(h.Time) {
			return b, false
		}
	}
	b = append(b, `{"v":`...)
	b = appendSchema(b, st.V)
	b = appendStrField(b, "job_id", st.JobID, false)
	b = appendStrField(b, "item_id", st.ItemID, false)
	b = appendIntField(b, "generation", int64(st.Generation))
	b = appendIntField(b, "step", int64(st.Step))
	b = appendIntField(b, "step_attempt", int64(st.StepAttempt))
	b = append(b, `,"step_first_failure":`...)
	b = appendJSONTime(b, st.StepFirstFailure)
	b = appendStrField(b, "step_delay_spent", st.StepDelaySpent.String(), false)
	if st.LastDelay != 0 {
		b = appendStrField(b, "last_delay", st.LastDelay.String(), false)
	}
	if !st.StartedAt.IsZero() {
		b = append(b, `,"started_at":`...)
		b = appendJSONTime(b, st.StartedAt)
	}
	if st.ItemRun != 0 {
		b = appendIntField(b, "item_run", int64(st.ItemRun))
	}
	if st.ItemDelay != 0 {
		b = appendStrField(b, "item_delay", st.ItemDelay.String(), false)
	}
	b = appendIntField(b, "retries", int64(st.Retries))
	if len(st.Outputs) > 0 {
		b = append(b, `,"outputs":[`...)
		for i, o := range st.Outputs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, o...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	if len(st.Ran) > 0 {
		b = append(b, `,"ran":[`...)
		for i, r := range st.Ran {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"step":`...)
			b = strconv.AppendInt(b, int64(r.Step), 10)
			b = appendIntField(b, "runs", int64(r.Runs))
			b = appendIntField(b, "duration_ms", r.DurationMS)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"first_failure":`...)
	b = appendJSONTime(b, st.FirstFailure)
	if st.History == nil {
		b = append(b, `,"history":null`...)
	} else {
		b = append(b, `,"history":[`...)
		for i := range st.History {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttempt(b, &st.History[i])
		}
		b = append(b, ']')
	}
	if st.HistoryDropped != 0 {
		b = appendIntField(b, "history_dropped", int64(st.HistoryDropped))
	}
	b = appendStrField(b, "final", st.Final, true)
	b = appendStrField(b, "reason", st.Reason, true)
	b = appendStrField(b, "error", st.Error, true)
	b = appendStrField(b, "error_class", st.ErrorClass, true)
	if st.Park != 0 {
		b = appendIntField(b, "park", int64(st.Park))
	}
	if !st.ParkUntil.IsZero() {
		b = append(b, `,"park_until":`...)
		b = appendJSONTime(b, st.ParkUntil)
	}
	return append(b, '}'), true
}

// appendAttempt appends json.Marshal(h) for appendItemState, which checked
// its strings and time.
func appendAttempt(b []byte, h *messages.Attempt) []byte {
	b = append(b, `{"attempt":`...)
	b = strconv.AppendInt(b, int64(h.Attempt), 10)
	b = appendIntField(b, "step", int64(h.Step))
	b = appendStrField(b, "step_name", h.StepName, true)
	b = appendStrField(b, "agent", h.Agent, true)
	b = append(b, `,"time":`...)
	b = appendJSONTime(b, h.Time)
	b = appendIntField(b, "duration_ms", h.DurationMS)
	b = appendStrField(b, "error_class", h.ErrorClass, true)
	b = appendStrField(b, "message", h.Message, true)
	if h.ExitCode != nil {
		b = appendIntField(b, "exit_code", int64(*h.ExitCode))
	}
	if h.TimedOut {
		b = append(b, `,"timed_out":true`...)
	}
	b = appendStrField(b, "decision", h.Decision, true)
	if h.DelayMS != 0 {
		b = appendIntField(b, "delay_ms", h.DelayMS)
	}
	if h.Generation != 0 {
		b = appendIntField(b, "generation", int64(h.Generation))
	}
	if h.ItemRun != 0 {
		b = appendIntField(b, "item_run", int64(h.ItemRun))
	}
	if h.NotRun {
		b = append(b, `,"not_run":true`...)
	}
	return append(b, '}')
}
