package simulate

import (
	"encoding/json"
	"time"
)

// Phases of a run, relative to the outage. A run without an outage has
// only PhaseBefore.
const (
	PhaseBefore = "before" // [0, outage start)
	PhaseDuring = "during" // the outage
	PhaseAfter  = "after"  // from its end (the ramp included) to the end of the job
)

// Result is what a simulated run did to the dependency and to the job. A
// Result is a plain value; it is not safe to mutate from several goroutines.
type Result struct {
	// Items is the number of the job's items.
	Items int64
	// Duration is when the job's map phase ended: its last item finished,
	// or a policy, or the best-effort deadline, ended it.
	Duration time.Duration
	// State and Reason are the job's end state and completion reason, as in
	// a job status (succeeded, failed or stopped; all_completed, ...).
	State  string
	Reason string
	// Truncated is true when the run reached Config.Horizon before the job
	// ended; the counts are those of that moment.
	Truncated bool

	// Attempts are the calls to the dependency (runs of the dependency
	// step), and Failures those that failed.
	Attempts int64
	Failures int64
	// Deliveries are the work messages' deliveries, parked and snoozed
	// ones included (what MaxDeliver counts).
	Deliveries int64
	// Retries are the retries granted: the job budget consumed.
	Retries int64
	// Snoozes and Parked count deliveries delayed by retry.Snooze and by
	// the circuit breaker; they spend no attempt and no budget.
	Snoozes int64
	Parked  int64
	// FailedFast counts the runs of the dependency step its own circuit
	// breaker (retry_config.circuit_breaker) refused: the step failed fast.
	FailedFast int64
	// LimitWaits counts the deliveries sent to wait outside the agent for
	// the dependency step's limit (no attempt, no budget spent).
	LimitWaits int64

	// Outcomes of the items; they add up to Items.
	Succeeded    int64
	DeadLettered int64
	Skipped      int64
	Failed       int64 // taken over by on_item_failure: custom
	NotRun       int64
	// Recovered are the succeeded items that had failed at least once.
	Recovered int64
	// Reasons counts the dead letters and failed items by reason
	// (attempts, job_budget_exhausted, ...).
	Reasons map[string]int64

	// Budget is the job retry budget and its use.
	Budget Budget
	// Phases split the calls before, during and after the outage.
	Phases []Phase
	// Amplification is Attempts / Items.
	Amplification float64
	// PeakRate is the highest rate of calls to the dependency, in calls per
	// second, over one bucket of Series, and PeakAt that bucket's start.
	PeakRate float64
	PeakAt   time.Duration
	// Breaker is the job's circuit breaker over the run (nil: none).
	Breaker *Breaker
	// Series are the calls to the dependency over time.
	Series Series
}

// Budget is the job retry budget of a run: the effective values the
// coordinator would record and what the run consumed. A plain value.
type Budget struct {
	Total      int
	PerItemMax int
	Consumed   int
	// Exhausted is true when Consumed reached Total, at ExhaustedAt.
	Exhausted   bool
	ExhaustedAt time.Duration
	// Denied counts the claims refused, by reason
	// (item_budget_exhausted, job_budget_exhausted).
	Denied map[string]int64
}

// Phase is one phase of a run (PhaseBefore, PhaseDuring, PhaseAfter).
type Phase struct {
	Name     string
	From, To time.Duration
	// Attempts are the calls made in the phase, Items the distinct items
	// that made them, and Amplification their ratio: how many calls the
	// dependency saw per item that needed it.
	Attempts      int64
	Failures      int64
	Items         int64
	Amplification float64
}

// Breaker is what the job's circuit breaker did over a run.
type Breaker struct {
	// Opened counts the transitions to open, and OpenFor the time spent
	// open (half-open excluded).
	Opened  int
	OpenFor time.Duration
	// Transitions are the state changes in order, the first
	// MaxTransitions of them.
	Transitions []Transition
}

// MaxTransitions bounds Breaker.Transitions.
const MaxTransitions = 1000

// Transition is one change of the breaker's state.
type Transition struct {
	At       time.Duration
	From, To string
}

// Series is a time series of the calls to the dependency: Attempts[i] and
// Failures[i] were made in [i·Bucket, (i+1)·Bucket). It is a plain value.
type Series struct {
	Bucket   time.Duration
	Attempts []int64
	Failures []int64
}

// Rate is the call rate of bucket i, in calls per second.
func (s Series) Rate(i int) float64 {
	return float64(s.Attempts[i]) / s.Bucket.Seconds()
}

// ms is a duration in milliseconds, as the JSON output writes durations
// (like `fleetctl backoff plan --json`).
func ms(d time.Duration) int64 { return d.Milliseconds() }

// MarshalJSON writes the result with snake_case names and durations in
// milliseconds (fields ending in _ms).
func (r *Result) MarshalJSON() ([]byte, error) {
	type budgetJSON struct {
		Total         int              `json:"total"`
		PerItemMax    int              `json:"per_item_max"`
		Consumed      int              `json:"consumed"`
		Exhausted     bool             `json:"exhausted"`
		ExhaustedAtMS *int64           `json:"exhausted_at_ms,omitempty"`
		Denied        map[string]int64 `json:"denied"`
	}
	type phaseJSON struct {
		Name          string  `json:"name"`
		FromMS        int64   `json:"from_ms"`
		ToMS          int64   `json:"to_ms"`
		Attempts      int64   `json:"attempts"`
		Failures      int64   `json:"failures"`
		Items         int64   `json:"items"`
		Amplification float64 `json:"amplification"`
	}
	type transitionJSON struct {
		AtMS int64  `json:"at_ms"`
		From string `json:"from"`
		To   string `json:"to"`
	}
	type breakerJSON struct {
		Opened      int              `json:"opened"`
		OpenForMS   int64            `json:"open_for_ms"`
		Transitions []transitionJSON `json:"transitions"`
	}
	type seriesJSON struct {
		BucketMS int64   `json:"bucket_ms"`
		Attempts []int64 `json:"attempts"`
		Failures []int64 `json:"failures"`
	}
	out := struct {
		Items         int64            `json:"items"`
		DurationMS    int64            `json:"duration_ms"`
		State         string           `json:"state"`
		Reason        string           `json:"completion_reason"`
		Truncated     bool             `json:"truncated,omitempty"`
		Attempts      int64            `json:"attempts"`
		Failures      int64            `json:"failures"`
		Deliveries    int64            `json:"deliveries"`
		Retries       int64            `json:"retries"`
		Snoozes       int64            `json:"snoozes"`
		Parked        int64            `json:"parked"`
		FailedFast    int64            `json:"failed_fast,omitempty"`
		Succeeded     int64            `json:"succeeded"`
		Recovered     int64            `json:"recovered"`
		DeadLettered  int64            `json:"dead_lettered"`
		Skipped       int64            `json:"skipped"`
		Failed        int64            `json:"failed"`
		NotRun        int64            `json:"not_run"`
		Reasons       map[string]int64 `json:"reasons"`
		Budget        budgetJSON       `json:"budget"`
		Amplification float64          `json:"amplification"`
		Phases        []phaseJSON      `json:"phases"`
		PeakRate      float64          `json:"peak_rate"`
		PeakAtMS      int64            `json:"peak_at_ms"`
		Breaker       *breakerJSON     `json:"breaker,omitempty"`
		Series        seriesJSON       `json:"series"`
	}{
		Items: r.Items, DurationMS: ms(r.Duration), State: r.State, Reason: r.Reason, Truncated: r.Truncated,
		Attempts: r.Attempts, Failures: r.Failures, Deliveries: r.Deliveries, Retries: r.Retries,
		Snoozes: r.Snoozes, Parked: r.Parked, FailedFast: r.FailedFast, Succeeded: r.Succeeded, Recovered: r.Recovered,
		DeadLettered: r.DeadLettered, Skipped: r.Skipped, Failed: r.Failed, NotRun: r.NotRun,
		Reasons: nonNil(r.Reasons), Amplification: round3(r.Amplification),
		PeakRate: round3(r.PeakRate), PeakAtMS: ms(r.PeakAt),
		Budget: budgetJSON{
			Total: r.Budget.Total, PerItemMax: r.Budget.PerItemMax, Consumed: r.Budget.Consumed,
			Exhausted: r.Budget.Exhausted, Denied: nonNil(r.Budget.Denied),
		},
		Phases: make([]phaseJSON, len(r.Phases)),
		Series: seriesJSON{BucketMS: ms(r.Series.Bucket), Attempts: nonNilSlice(r.Series.Attempts), Failures: nonNilSlice(r.Series.Failures)},
	}
	if r.Budget.Exhausted {
		at := ms(r.Budget.ExhaustedAt)
		out.Budget.ExhaustedAtMS = &at
	}
	for i, p := range r.Phases {
		out.Phases[i] = phaseJSON{Name: p.Name, FromMS: ms(p.From), ToMS: ms(p.To), Attempts: p.Attempts,
			Failures: p.Failures, Items: p.Items, Amplification: round3(p.Amplification)}
	}
	if b := r.Breaker; b != nil {
		bj := &breakerJSON{Opened: b.Opened, OpenForMS: ms(b.OpenFor), Transitions: make([]transitionJSON, len(b.Transitions))}
		for i, t := range b.Transitions {
			bj.Transitions[i] = transitionJSON{AtMS: ms(t.At), From: t.From, To: t.To}
		}
		out.Breaker = bj
	}
	return json.Marshal(out)
}

func nonNil(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

func nonNilSlice(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

// round3 rounds to three decimals, for stable JSON.
func round3(f float64) float64 {
	const k = 1000
	if f >= 0 {
		return float64(int64(f*k+0.5)) / k
	}
	return -float64(int64(-f*k+0.5)) / k
}
