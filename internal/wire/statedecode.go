package wire

import (
	"encoding/json"
	"time"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Decoding of the item state, which an agent reads on every redelivery of
// a retried item that another agent wrote (docs/benchmarks.md, "Retries
// against runs"): json.Unmarshal of it was the largest part of a retry's
// CPU in the agent that reads it. As DecodeWorkItem, it walks the members
// and sets the fields directly, and leaves what it does not read plainly
// to encoding/json, field by field or for the whole state, so that the
// result is always what json.Unmarshal gives (FuzzDecodeItemState).

// itemStateFields are ItemState's JSON names, in field order: a member's
// bit in the decoder's set of members seen is its index here.
var itemStateFields = []string{"v", "job_id", "item_id", "generation", "step", "step_attempt", "step_first_failure",
	"step_delay_spent", "last_delay", "started_at", "item_run", "item_delay", "retries", "outputs", "captures", "ran",
	"first_failure", "history", "history_dropped", "final", "reason", "error", "error_class", "park", "park_until"}

// attemptFields are messages.Attempt's JSON names, in field order.
var attemptFields = []string{"attempt", "step", "step_name", "agent", "time", "duration_ms", "error_class", "message",
	"exit_code", "timed_out", "decision", "delay_ms", "generation", "item_run", "not_run"}

// DecodeItemState decodes an item state into st, as json.Unmarshal into a
// zero ItemState does, faster. st's strings share one copy of data.
func DecodeItemState(data []byte, st *ItemState) error {
	*st = ItemState{}
	t := trimJSONSpace(data)
	if len(t) > 0 && t[0] == '{' && decodeItemState(t, st) == nil {
		return nil
	}
	*st = ItemState{}
	return json.Unmarshal(data, st)
}

// stateDecoder holds what decoding one state needs: the state's bytes,
// and one string copy of them whose pieces become the plain strings.
type stateDecoder struct {
	obj []byte
	src string
}

// str sets *dst to the JSON string v, a piece of d.obj: a piece of d.src
// when v is plain, else what json.Unmarshal gives.
func (d *stateDecoder) str(v []byte, dst *string) error {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		// v is d.obj[i:j] (members and elements only slice), so cap(v) =
		// cap(d.obj) - i.
		if i := cap(d.obj) - cap(v); i >= 0 && i+len(v) <= len(d.src) && plainString(v[1:len(v)-1]) {
			if s := d.src[i+1 : i+len(v)-1]; s == string(v[1:len(v)-1]) {
				*dst = s
				return nil
			}
		}
	}
	return setString(v, dst)
}

// seen marks member bit of *set and reports errSlowPath for a member that
// came before: json.Unmarshal decodes a repeated slice or pointer into
// what the first one left, which is not worth copying here.
func seen(set *uint32, bit int) error {
	if *set&(1<<bit) != 0 {
		return errSlowPath
	}
	*set |= 1 << bit
	return nil
}

func decodeItemState(obj []byte, st *ItemState) error {
	d := stateDecoder{obj: obj, src: string(obj)}
	var set uint32
	return object(obj, func(name, v []byte) error {
		bit := fieldIndex(name, itemStateFields)
		if bit < 0 {
			return unknownMember(name, v, itemStateFields)
		}
		if err := seen(&set, bit); err != nil {
			return err
		}
		switch bit {
		case 0:
			return setSchema(v, &st.V)
		case 1:
			return d.str(v, &st.JobID)
		case 2:
			return d.str(v, &st.ItemID)
		case 3:
			return setInt(v, &st.Generation)
		case 4:
			return setInt(v, &st.Step)
		case 5:
			return setInt(v, &st.StepAttempt)
		case 6:
			return setTime(v, &st.StepFirstFailure)
		case 7:
			return setDuration(v, &st.StepDelaySpent)
		case 8:
			return setDuration(v, &st.LastDelay)
		case 9:
			return setTime(v, &st.StartedAt)
		case 10:
			return setInt(v, &st.ItemRun)
		case 11:
			return setDuration(v, &st.ItemDelay)
		case 12:
			return setInt(v, &st.Retries)
		case 13:
			return d.outputs(v, &st.Outputs)
		case 14:
			return json.Unmarshal(v, &st.Captures)
		case 15:
			return json.Unmarshal(v, &st.Ran)
		case 16:
			return setTime(v, &st.FirstFailure)
		case 17:
			return d.history(v, &st.History)
		case 18:
			return setInt(v, &st.HistoryDropped)
		case 19:
			return d.str(v, &st.Final)
		case 20:
			return d.str(v, &st.Reason)
		case 21:
			return d.str(v, &st.Error)
		case 22:
			return d.str(v, &st.ErrorClass)
		case 23:
			return setInt(v, &st.Park)
		default: // 24
			return setTime(v, &st.ParkUntil)
		}
	})
}

// fieldIndex is the index of name in fields, or -1.
func fieldIndex(name []byte, fields []string) int {
	for i, f := range fields {
		if string(name) == f {
			return i
		}
	}
	return -1
}

// outputs sets *dst to the JSON array of strings v.
func (d *stateDecoder) outputs(v []byte, dst *[]string) error {
	if v[0] != '[' {
		return json.Unmarshal(v, dst)
	}
	out := make([]string, 0, 4)
	err := elements(v, func(e []byte) error {
		if e[0] != '"' {
			return errSlowPath
		}
		out = append(out, "")
		return d.str(e, &out[len(out)-1])
	})
	if err != nil {
		return json.Unmarshal(v, dst)
	}
	*dst = out
	return nil
}

// history sets *dst to the JSON array of attempts v.
func (d *stateDecoder) history(v []byte, dst *[]messages.Attempt) error {
	if v[0] != '[' {
		return json.Unmarshal(v, dst)
	}
	out := make([]messages.Attempt, 0, 4)
	err := elements(v, func(e []byte) error {
		if e[0] != '{' {
			return errSlowPath
		}
		out = append(out, messages.Attempt{})
		end, err := members(e, d.attempt(&out[len(out)-1]))
		if err == nil && end != len(e) {
			err = errSlowPath
		}
		return err
	})
	if err != nil {
		return json.Unmarshal(v, dst)
	}
	*dst = out
	return nil
}

// attempt returns the members' function that decodes an attempt into a.
func (d *stateDecoder) attempt(a *messages.Attempt) func(name, v []byte) error {
	var set uint32
	return func(name, v []byte) error {
		bit := fieldIndex(name, attemptFields)
		if bit < 0 {
			return unknownMember(name, v, attemptFields)
		}
		if err := seen(&set, bit); err != nil {
			return err
		}
		switch bit {
		case 0:
			return setInt(v, &a.Attempt)
		case 1:
			return setInt(v, &a.Step)
		case 2:
			return d.str(v, &a.StepName)
		case 3:
			return d.str(v, &a.Agent)
		case 4:
			return setTime(v, &a.Time)
		case 5:
			return setInt64(v, &a.DurationMS)
		case 6:
			return d.str(v, &a.ErrorClass)
		case 7:
			return d.str(v, &a.Message)
		case 8:
			if n, ok := smallInt(v); ok {
				c := int(n)
				a.ExitCode = &c
				return nil
			}
			return json.Unmarshal(v, &a.ExitCode)
		case 9:
			return setBool(v, &a.TimedOut)
		case 10:
			return d.str(v, &a.Decision)
		case 11:
			return setInt64(v, &a.DelayMS)
		case 12:
			return setInt(v, &a.Generation)
		case 13:
			return setInt(v, &a.ItemRun)
		default: // 14
			return setBool(v, &a.NotRun)
		}
	}
}

// elements calls fn with every element of the JSON array that is all of
// arr. Like members, it ends with errSlowPath at anything malformed.
func elements(arr []byte, fn func(v []byte) error) error {
	i := jsonscan.SkipSpace(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		if i+1 != len(arr) {
			return errSlowPath
		}
		return nil
	}
	for i < len(arr) {
		end := jsonscan.SkipValue(arr, i)
		if end <= i || end > len(arr) {
			return errSlowPath
		}
		if err := fn(arr[i:end]); err != nil {
			return err
		}
		i = jsonscan.SkipSpace(arr, end)
		switch {
		case i >= len(arr):
			return errSlowPath
		case arr[i] == ']':
			if i+1 != len(arr) {
				return errSlowPath
			}
			return nil
		case arr[i] == ',':
			i = jsonscan.SkipSpace(arr, i+1)
		default:
			return errSlowPath
		}
	}
	return errSlowPath
}

// setTime sets *dst to the JSON string v as time.Time's UnmarshalJSON
// reads it, which is what json.Unmarshal calls.
func setTime(v []byte, dst *time.Time) error {
	if v[0] != '"' {
		return errSlowPath
	}
	return dst.UnmarshalJSON(v)
}

// setDuration sets *dst to the JSON string v as messages.Duration reads
// it (its UnmarshalText).
func setDuration(v []byte, dst *messages.Duration) error {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		if s := v[1 : len(v)-1]; plainString(s) {
			return dst.UnmarshalText(s)
		}
	}
	return json.Unmarshal(v, dst)
}

// setBool sets *dst to the JSON literal v.
func setBool(v []byte, dst *bool) error {
	switch string(v) {
	case "true":
		*dst = true
		return nil
	case "false":
		*dst = false
		return nil
	}
	return json.Unmarshal(v, dst)
}
