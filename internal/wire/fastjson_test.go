package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

var fastSeeds = []string{
	`{"job_id":"j","item_id":"a","index":3,"outcome":"succeeded","generation":0,"attempts":1,"retries":0,"agent":"a1","finished_at":"2026-05-01T12:00:00.123456789Z","duration_ms":0}`,
	`[{"index":1,"outcome":"failed","error":"boom \u00e9","steps":[{"step":0,"runs":2,"duration_ms":5}]},{"index":2,"Outcome":"x"}]`,
	`{"job_id":"j","item_id":"i","index":7,"group":"g","payload":{"a":[1,"}"]},"generation":2,"correlation_id":"j:7","replay_count":1,"history":[{"attempt":1}],"reset_attempts":true,"phase":"reduce","reduce":{"results_object":"o"}}`,
	`{"index":12345678901,"generation":-3,"payload":null,"finished_at":null,"\u0069ndex":4}`,
	`{"index":1.5}`, `{"index":"1"}`, `[null]`, `[]`, `{}`, `{"index":01}`, `{"item_id":"\ud800"}`, "{\"agent\":\"\xff\"}",
	`{"index":1,"index":2,"output":"a","output":"b"}`, `{"steps":[1]}`, `{"JOB_ID":"upper"}`, `{"finished_at":"nope"}`,
	// Values repeated from one result to the next (reused, not copied),
	// escaped or not.
	`[{"job_id":"j","outcome":"a\"b","agent":"x"},{"job_id":"j","outcome":"a\"b","agent":"x\u0041"},{"job_id":"j","agent":"xA","group":"g"}]`,
	`[{"job_id":"j","phase":"reduce","reason":"r","error_class":"c"},{"job_id":"k","phase":"reduce","reason":"r","error_class":"c"}]`,
}

// DecodeResults gives what json.Unmarshal gives.
func FuzzDecodeResults(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		got, err := DecodeResults([]byte(data), make([]messages.Result, 0, 1))
		var want []messages.Result
		var wantErr error
		switch t := trimmed(data); {
		case len(t) > 0 && t[0] == '{':
			want = []messages.Result{{}}
			wantErr = json.Unmarshal([]byte(data), &want[0])
		case len(t) > 0 && t[0] == '[':
			wantErr = json.Unmarshal([]byte(data), &want)
		default:
			wantErr = errNotResults
		}
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeResults(%q): error %v, json.Unmarshal: %v", data, err, wantErr)
		}
		if err == nil && len(want)+len(got) > 0 {
			require.Equal(t, want, got, "DecodeResults(%q)", data)
		}
	})
}

// DecodeWorkItem gives what json.Unmarshal gives.
func FuzzDecodeWorkItem(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var got, want WorkItem
		err := DecodeWorkItem([]byte(data), &got)
		wantErr := json.Unmarshal([]byte(data), &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeWorkItem(%q): error %v, json.Unmarshal: %v", data, err, wantErr)
		}
		if err == nil {
			require.Equal(t, want, got, "DecodeWorkItem(%q)", data)
		}
	})
}

func trimmed(s string) []byte {
	b := []byte(s)
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// benchBatch is a results message of 100 results as an agent sends them.
func benchBatch() []byte {
	var batch ResultBatch
	one := []byte(`{"job_id":"bench-1","item_id":"item-0000001","index":0,"outcome":"succeeded","generation":0,"attempts":1,"retries":0,"agent":"bench-agent-1","finished_at":"2026-11-26T10:51:13.123456789Z","duration_ms":0}`)
	for range 100 {
		batch.Add(one)
	}
	return batch.Payload()
}

func BenchmarkDecodeResults(b *testing.B) {
	data := benchBatch()
	var into []messages.Result
	b.ReportAllocs()
	for b.Loop() {
		into, _ = DecodeResults(data, into)
	}
}

func BenchmarkDecodeResultsByUnmarshal(b *testing.B) {
	data := benchBatch()
	b.ReportAllocs()
	for b.Loop() {
		var into []messages.Result
		_ = json.Unmarshal(data, &into)
	}
}

// EncodeResult writes what json.Marshal writes, whichever way it takes.
func FuzzEncodeResult(f *testing.F) {
	f.Add("j", "item-1", int64(3), "", "succeeded", 0, 1, 0, "", "", "done", "a1", int64(1795691307268844802), int64(12), false, int32(0))
	f.Add("j", "<&>", int64(-1), "g", "failed", 2, 3, 4, "boom \"x\"", "é", "", "", int64(0), int64(-5), true, int32(0))
	f.Add("j", "i", int64(1), "", "failed", 0, 1, 0, "", "", "", "", int64(1795691307268844802), int64(1), false, int32(5*3600+1800))
	f.Add("j", "i", int64(1), "", "failed", 0, 1, 0, "", "", "", "", int64(1795691307268844802), int64(1), false, int32(-3600-7))
	f.Fuzz(func(t *testing.T, job, item string, index int64, group, outcome string, gen, attempts, retries int,
		errMsg, output, phase, agent string, finished, dur int64, steps bool, zone int32) {
		at := time.Unix(0, finished).UTC()
		if zone != 0 { // a time in another zone, as a caller's clock may give it
			at = at.In(time.FixedZone("z", int(zone)))
		}
		r := &messages.Result{JobID: job, ItemID: item, Index: index, Group: group, Outcome: outcome, Generation: gen,
			Attempts: attempts, Retries: retries, Error: errMsg, Reason: phase, Output: output, Phase: phase, Agent: agent,
			FinishedAt: at, DurationMS: dur}
		if steps {
			r.Steps = []messages.StepRun{{Step: 1, Runs: 2, DurationMS: 3}}
		}
		want, wantErr := json.Marshal(r)
		got, err := EncodeResult(r, 1<<30)
		require.Equal(t, wantErr != nil, err != nil)
		require.Equal(t, string(want), string(got))
	})
}

// jsonNames lists the JSON names of v's fields.
func jsonNames(v any) []string {
	var names []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// The direct decoders and encoders know every field: one added to
// WorkItem or Result must be added to them too (a field they do not know
// would be dropped silently).
func TestFastCodecsKnowEveryField(t *testing.T) {
	require.ElementsMatch(t, jsonNames(WorkItem{}), workItemFields)
	require.ElementsMatch(t, jsonNames(messages.Result{}), resultFields)

	zero := func(v reflect.Value) bool { return v.IsZero() }
	full := WorkItem{V: 1, JobID: "j", ItemID: "i", Index: 1, Group: "g", Payload: json.RawMessage(`{"a":1}`), Generation: 2,
		CorrelationID: "c", ReplayCount: 3, History: []messages.Attempt{{Attempt: 1}}, HistoryDropped: 4, ResetAttempts: true,
		Phase: messages.PhaseReduce, Reduce: &messages.ReduceInput{ResultsObject: "o"}, Park: 5, Held: 2, Sig: "c2ln"}
	rv := reflect.ValueOf(full)
	for i := range rv.NumField() {
		require.False(t, zero(rv.Field(i)), "the test's WorkItem sets %s", rv.Type().Field(i).Name)
	}
	data, err := json.Marshal(&full)
	require.NoError(t, err)
	var got WorkItem
	require.NoError(t, DecodeWorkItem(data, &got))
	require.Equal(t, full, got)

	res := messages.Result{V: 1, JobID: "j", ItemID: "i", Index: 1, Group: "g", Outcome: "failed", Generation: 2, Attempts: 3, Retries: 4, ItemRuns: 2,
		Reason: "r", Error: "e", ErrorClass: "c", Signature: "s", Output: "o", Phase: messages.PhaseReduce, Agent: "a",
		FinishedAt: time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC), DurationMS: 6, Steps: []messages.StepRun{{Step: 1, Runs: 2, DurationMS: 3}},
		Setup: &messages.SetupOutput{Items: `[{"n": 1}]`, Captures: json.RawMessage(`{"v":{"value":"x"}}`)}}
	rv = reflect.ValueOf(res)
	for i := range rv.NumField() {
		require.False(t, zero(rv.Field(i)), "the test's Result sets %s", rv.Type().Field(i).Name)
	}
	data, err = json.Marshal(&res)
	require.NoError(t, err)
	rs, err := DecodeResults(data, nil)
	require.NoError(t, err)
	require.Equal(t, []messages.Result{res}, rs)
	res.Steps, res.Setup = nil, nil // what appendResult writes directly
	direct, ok := appendResult(nil, &res)
	require.True(t, ok)
	want, err := json.Marshal(&res)
	require.NoError(t, err)
	require.Equal(t, string(want), string(direct))
}

// A batch's results share the strings that repeat from one to the next
// (the job, the outcome, the agent): what is left to allocate per result
// is its item id.
func TestDecodeResultsReusesRepeatedStrings(t *testing.T) {
	var b ResultBatch
	const n = 100
	for i := range n {
		data, err := EncodeResult(&messages.Result{JobID: "job-1", ItemID: fmt.Sprintf("item-%d", i), Index: int64(i),
			Outcome: messages.OutcomeSucceeded, Agent: "agent-1", Attempts: 1, FinishedAt: time.Unix(1, 0).UTC()}, 1<<20)
		require.NoError(t, err)
		b.Add(data)
	}
	payload := b.Payload()
	into := make([]messages.Result, 0, n)
	rs, err := DecodeResults(payload, into)
	require.NoError(t, err)
	require.Len(t, rs, n)
	require.Equal(t, unsafe.StringData(rs[0].JobID), unsafe.StringData(rs[n-1].JobID))
	require.Equal(t, unsafe.StringData(rs[0].Agent), unsafe.StringData(rs[n-1].Agent))
	allocs := testing.AllocsPerRun(20, func() {
		_, _ = DecodeResults(payload, into[:0])
	})
	require.LessOrEqual(t, allocs, float64(n+10), "about one allocation per result (its item id)")
}

// EncodeItemState writes what json.Marshal writes, whichever way it takes.
func FuzzEncodeItemState(f *testing.F) {
	f.Add("j", "item-1", 0, 1, int64(1795691307268844802), int64(10e6), int64(0), 2, "out", "a1", "503 Service Unavailable", "retry", int64(10), 1, false, "", int32(0), 0)
	f.Add("j", "<&>", 2, 3, int64(0), int64(-5), int64(36e11), 0, "é", "", "boom \"x\"", "", int64(0), 0, true, "dead_lettered", int32(5*3600+1800), 2)
	f.Add("j", "i", 0, 0, int64(1795691307268844802), int64(0), int64(1), 1, "", "a", "", "give_up", int64(-1), 7, true, "", int32(-3600-7), 0)
	f.Fuzz(func(t *testing.T, job, item string, step, attempts int, at, spent, last int64, retries int, output, agent, msg, decision string,
		delay int64, history int, extra bool, final string, zone int32, park int) {
		when := time.Unix(0, at).UTC()
		if zone != 0 { // a time in another zone, as a caller's clock may give it
			when = when.In(time.FixedZone("z", int(zone)))
		}
		st := &ItemState{JobID: job, ItemID: item, Step: step, StepAttempt: attempts, StepFirstFailure: when,
			StepDelaySpent: messages.Duration(spent), LastDelay: messages.Duration(last), Retries: retries, FirstFailure: when,
			Final: final, Reason: final, Error: msg, Park: park}
		if extra {
			st.StartedAt, st.ParkUntil, st.ItemRun, st.ItemDelay, st.HistoryDropped = when, when.Add(time.Second), 2, messages.Duration(delay), 3
			st.Outputs = []string{output, ""}
			st.Ran = []messages.StepRun{{Step: 1, Runs: 2, DurationMS: 3}, {Step: 2, Runs: 1, DurationMS: delay}}
			st.ErrorClass = decision
		}
		code := 2
		for i := range min(max(history, 0), 5) {
			a := messages.Attempt{Attempt: i + 1, Step: step, StepName: output, Agent: agent, Time: when.Add(time.Duration(i) * time.Millisecond),
				DurationMS: delay, ErrorClass: "error", Message: msg, Decision: decision, DelayMS: delay, Generation: i, ItemRun: i % 2,
				TimedOut: extra, NotRun: i%3 == 2}
			if i%2 == 1 {
				a.ExitCode = &code
			}
			st.History = append(st.History, a)
		}
		if history < 0 {
			st.History = []messages.Attempt{}
		}
		want, wantErr := json.Marshal(st)
		got, err := EncodeItemState(st, 1<<30)
		require.Equal(t, wantErr != nil, err != nil)
		require.Equal(t, string(want), string(got))
	})
}

// appendItemState knows every field of ItemState and of Attempt: a field
// added to either must be added to it too, or it would be dropped.
func TestItemStateEncoderKnowsEveryField(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	code := 3
	full := ItemState{V: 1, JobID: "j", ItemID: "i", Generation: 1, Step: 2, StepAttempt: 3, StepFirstFailure: at,
		StepDelaySpent: messages.Duration(time.Second), LastDelay: messages.Duration(time.Millisecond), StartedAt: at, ItemRun: 2,
		ItemDelay: messages.Duration(time.Minute), Retries: 4, Outputs: []string{"a", "b"},
		Captures: map[string]*Capture{"x": {}}, Ran: []messages.StepRun{{Step: 1, Runs: 1, DurationMS: 2}}, FirstFailure: at,
		History: []messages.Attempt{{Attempt: 1, Step: 2, StepName: "s", Agent: "a", Time: at, DurationMS: 5, ErrorClass: "error",
			Message: "m", ExitCode: &code, TimedOut: true, Decision: "retry", DelayMS: 6, Generation: 1, ItemRun: 2, NotRun: true}},
		HistoryDropped: 5, Final: "failed", Reason: "r", Error: "e", ErrorClass: "c", Park: 6, ParkUntil: at}
	rv := reflect.ValueOf(full)
	for i := range rv.NumField() {
		require.False(t, rv.Field(i).IsZero(), "the test's ItemState sets %s", rv.Type().Field(i).Name)
	}
	av := reflect.ValueOf(full.History[0])
	for i := range av.NumField() {
		require.False(t, av.Field(i).IsZero(), "the test's Attempt sets %s", av.Type().Field(i).Name)
	}
	_, ok := appendItemState(nil, &full)
	require.False(t, ok, "captures are left to json.Marshal")
	full.Captures = nil
	direct, ok := appendItemState(nil, &full)
	require.True(t, ok)
	want, err := json.Marshal(&full)
	require.NoError(t, err)
	require.Equal(t, string(want), string(direct))
}

// stateSeeds are item states as agents write them, and some that only
// encoding/json reads plainly.
func stateSeeds(f *testing.F) []string {
	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	code := 3
	states := []ItemState{
		{JobID: "j", ItemID: "item-1", StepFirstFailure: at, StepDelaySpent: messages.Duration(10 * time.Millisecond), Retries: 1, FirstFailure: at,
			History: []messages.Attempt{{Attempt: 1, Agent: "a1", Time: at, DurationMS: 1, ErrorClass: "error", Message: "flaky: failed", Decision: "retry", DelayMS: 10}}},
		{V: 1, JobID: "j", ItemID: "i", Generation: 1, Step: 2, StepAttempt: 3, StepFirstFailure: at.In(time.FixedZone("z", 5400)),
			StepDelaySpent: messages.Duration(time.Second), LastDelay: messages.Duration(time.Millisecond), StartedAt: at, ItemRun: 2,
			ItemDelay: messages.Duration(time.Minute), Retries: 4, Outputs: []string{"a", "b\u00e9", ""},
			Captures: map[string]*Capture{"x": {}}, Ran: []messages.StepRun{{Step: 1, Runs: 1, DurationMS: 2}}, FirstFailure: at,
			History: []messages.Attempt{{Attempt: 1, Step: 2, StepName: "s", Agent: "a", Time: at, DurationMS: 5, ErrorClass: "error",
				Message: "m <&> \"q\"", ExitCode: &code, TimedOut: true, Decision: "retry", DelayMS: 6, Generation: 1, ItemRun: 2, NotRun: true}, {}},
			HistoryDropped: 5, Final: "failed", Reason: "r", Error: "e", ErrorClass: "c", Park: 6, ParkUntil: at},
		{JobID: "j", History: []messages.Attempt{}, Outputs: []string{}},
	}
	var seeds []string
	for _, st := range states {
		data, err := json.Marshal(&st)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, string(data))
	}
	return append(seeds,
		`{"job_id":"j","job_id":"k","history":[{"attempt":1,"step":2}],"history":[{"attempt":3}]}`,
		`{"history":[{"attempt":1,"Attempt":2}],"outputs":["a",null],"STEP":3}`,
		`{"history":[null,{"exit_code":null,"timed_out":null}],"outputs":null,"captures":null,"ran":null}`,
		`{"step_delay_spent":"1x","last_delay":7,"item_delay":"1\u0073"}`,
		`{"step_first_failure":"2026-05-01T12:00:00Z","started_at":null,"park_until":"nope","first_failure":"2026-13-01T00:00:00Z"}`,
		`{"history":[{"exit_code":12345678901,"timed_out":tru}]}`, `{"history":[{"exit_code":-0,"not_run":false,"x":[1,{"y":2}]}]}`,
		`{"step_budget_expiry":"2026-05-01T12:00:00Z","step":1}`, `{"outputs":["a" "b"]}`, `{"history":[{},]}`, ` {"v":2} `, `{}`, `[]`, `null`,
		`{"retries":1.0}`, `{"generation":-3,"park":99999999999}`, "{\"final\":\"\xff\"}", `{"error":"a\u2028b"}`,
	)
}

// DecodeItemState gives what json.Unmarshal gives.
func FuzzDecodeItemState(f *testing.F) {
	for _, s := range stateSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var got, want ItemState
		err := DecodeItemState([]byte(data), &got)
		wantErr := json.Unmarshal([]byte(data), &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeItemState(%q): error %v, json.Unmarshal: %v", data, err, wantErr)
		}
		if err == nil {
			require.Equal(t, want, got, "DecodeItemState(%q)", data)
		}
	})
}

// The state decoder knows every field of ItemState and of Attempt, in
// their order: a field added to either must be added to it too.
func TestItemStateDecoderKnowsEveryField(t *testing.T) {
	require.Equal(t, jsonNames(ItemState{}), itemStateFields)
	require.Equal(t, jsonNames(messages.Attempt{}), attemptFields)
	require.Less(t, len(itemStateFields), 32, "a member's bit in a uint32")

	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	code := 3
	full := ItemState{V: 1, JobID: "j", ItemID: "i", Generation: 1, Step: 2, StepAttempt: 3, StepFirstFailure: at,
		StepDelaySpent: messages.Duration(time.Second), LastDelay: messages.Duration(time.Millisecond), StartedAt: at.Add(1), ItemRun: 2,
		ItemDelay: messages.Duration(time.Minute), Retries: 4, Outputs: []string{"a", "b"},
		Captures: map[string]*Capture{"x": {}}, Ran: []messages.StepRun{{Step: 1, Runs: 1, DurationMS: 2}}, FirstFailure: at.Add(2),
		History: []messages.Attempt{{Attempt: 1, Step: 2, StepName: "s", Agent: "a", Time: at.Add(3), DurationMS: 5, ErrorClass: "error",
			Message: "m", ExitCode: &code, TimedOut: true, Decision: "retry", DelayMS: 6, Generation: 1, ItemRun: 2, NotRun: true}},
		HistoryDropped: 5, Final: "failed", Reason: "r", Error: "e", ErrorClass: "c", Park: 6, ParkUntil: at.Add(4)}
	rv := reflect.ValueOf(full)
	for i := range rv.NumField() {
		require.False(t, rv.Field(i).IsZero(), "the test's ItemState sets %s", rv.Type().Field(i).Name)
	}
	data, err := json.Marshal(&full)
	require.NoError(t, err)
	var got ItemState
	require.NoError(t, decodeItemState(data, &got), "the direct way, not encoding/json's")
	require.Equal(t, full, got)
}

// A retried item's usual state decodes with a handful of allocations: the
// string copy, the history and its slice.
func TestDecodeItemStateAllocations(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	st := ItemState{V: messages.SchemaVersion, JobID: "j", ItemID: "item-1", StepFirstFailure: at,
		StepDelaySpent: messages.Duration(20 * time.Millisecond), Retries: 2, FirstFailure: at, StepAttempt: 2, StartedAt: at}
	for i := range 2 {
		st.History = append(st.History, messages.Attempt{Attempt: i + 1, Agent: "a1", Time: at, DurationMS: 1, ErrorClass: "error",
			Message: "flaky: failed", Decision: "retry", DelayMS: 10})
	}
	data, err := EncodeItemState(&st, 1<<20)
	require.NoError(t, err)
	var got ItemState
	allocs := testing.AllocsPerRun(50, func() { require.NoError(t, DecodeItemState(data, &got)) })
	require.Equal(t, st, got)
	require.LessOrEqual(t, allocs, 4.0)
}

func BenchmarkDecodeItemState(b *testing.B) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	st := ItemState{JobID: "j", ItemID: "item-1", StepFirstFailure: at, StepDelaySpent: messages.Duration(20 * time.Millisecond), Retries: 2,
		FirstFailure: at, StepAttempt: 2, StartedAt: at}
	for i := range 2 {
		st.History = append(st.History, messages.Attempt{Attempt: i + 1, Agent: "a1", Time: at, DurationMS: 1, ErrorClass: "error",
			Message: "flaky: failed", Decision: "retry", DelayMS: 10})
	}
	data, _ := EncodeItemState(&st, 1<<20)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got ItemState
			_ = DecodeItemState(data, &got)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got ItemState
			_ = json.Unmarshal(data, &got)
		}
	})
}
