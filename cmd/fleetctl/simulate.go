package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/chart"
	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/simulate"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "simulate", summary: "simulate FILE --outage D --at T: what a retry policy does to a failing dependency", run: runSimulate})
}

const simulateUsage = "simulate FILE --outage D --at T [--error-rate R] [--items N] [--agents N --concurrency N] " +
	"[--step-duration D] [--compare 'key=value; …']… [--plot FILE.svg|.png] [--json]"

// durationValue is a flag holding a humantime duration ("200ms", "2m30s").
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0s"
	}
	return messages.Duration(*v.d).String()
}

func (v durationValue) Set(s string) error {
	d, err := messages.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d.D()
	return nil
}

func durationFlag(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{p}, name, usage)
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " | ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// simulateFlagOf names the flag behind a simulate.Config field path.
var simulateFlagOf = map[string]string{
	"items": "--items", "fleet.agents": "--agents", "fleet.concurrency": "--concurrency",
	"fleet.prefetch": "--prefetch", "fleet.max_deliver": "--max-deliver", "fleet.max_ack_pending": "--max-ack-pending",
	"dependency.step": "--step", "dependency.step_duration": "--step-duration", "dependency.fail_duration": "--fail-duration",
	"dependency.outage_at": "--at", "dependency.outage": "--outage", "dependency.error_rate": "--error-rate",
	"dependency.ramp": "--ramp", "dependency.slow": "--slow", "dependency.exit_code": "--exit-code",
	"dependency.retry_after": "--retry-after", "bucket": "--bucket", "budget": "--retry-budget-*",
}

// simulateRun is one run of the output: the job as written, or a variant.
type simulateRun struct {
	Name      string              `json:"name"`
	Overrides []simulate.Override `json:"-"`
	Result    *simulate.Result    `json:"result"`
	cfg       simulate.Config
}

// simulateReport is the --json output.
type simulateReport struct {
	Job        string             `json:"job"`
	Items      int64              `json:"items"`
	Fleet      simulateFleetJSON  `json:"fleet"`
	Dependency simulateDepJSON    `json:"dependency"`
	Runs       []simulateRunJSON  `json:"runs"`
	Seed       uint64             `json:"seed"`
	Budget     map[string]*string `json:"operator_budget"`
}

type simulateFleetJSON struct {
	Agents        int `json:"agents"`
	Concurrency   int `json:"concurrency"`
	Prefetch      int `json:"prefetch"`
	MaxDeliver    int `json:"max_deliver"`
	MaxAckPending int `json:"max_ack_pending"`
	// LocalRetryMaxMS is the agents' local retry bound; negative: none.
	LocalRetryMaxMS int64 `json:"local_retry_max_ms"`
}

type simulateDepJSON struct {
	Step           int     `json:"step"`
	StepName       string  `json:"step_name"`
	StepDurationMS int64   `json:"step_duration_ms"`
	FailDurationMS int64   `json:"fail_duration_ms"`
	OutageAtMS     int64   `json:"outage_at_ms"`
	OutageMS       int64   `json:"outage_ms"`
	ErrorRate      float64 `json:"error_rate"`
	RampMS         int64   `json:"ramp_ms"`
	SlowMS         int64   `json:"slow_ms"`
	Error          string  `json:"error"`
	RetryAfterMS   int64   `json:"retry_after_ms"`
}

type simulateRunJSON struct {
	Name      string            `json:"name"`
	Overrides map[string]string `json:"overrides"`
	Result    *simulate.Result  `json:"result"`
}

func runSimulate(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "simulate", simulateUsage)
	var cfg simulate.Config
	d := &cfg.Dependency
	items := fs.Int64("items", 0, "number of items (default: the spec's inline items or input file)")
	fs.IntVar(&cfg.Fleet.Agents, "agents", simulate.DefaultAgents, "agents")
	fs.IntVar(&cfg.Fleet.Concurrency, "concurrency", simulate.DefaultConcurrency, "items each agent runs at once")
	fs.IntVar(&cfg.Fleet.Prefetch, "prefetch", 0, "messages each agent buffers (default: what an agent's adaptive prefetch settles at for --step-duration)")
	fs.IntVar(&cfg.Fleet.MaxDeliver, "max-deliver", simulate.DefaultMaxDeliver, "the work consumer's MaxDeliver (-1: unlimited)")
	fs.IntVar(&cfg.Fleet.MaxAckPending, "max-ack-pending", simulate.DefaultMaxAckPending, "the work consumer's MaxAckPending (-1: unlimited)")
	durationFlag(fs, &cfg.Fleet.LocalRetryMax, "local-retry-max", simulate.DefaultLocalRetryMax, "retries of at most this delay run again on their agent, as the agents' --local-retry-max (negative: every retry is a delayed nak)")
	step := fs.String("step", "", "the step that calls the dependency: its name or 1-based number (default: the first)")
	durationFlag(fs, &d.StepDuration, "step-duration", simulate.DefaultStepDuration, "how long a step run takes")
	durationFlag(fs, &d.FailDuration, "fail-duration", 0, "how long a failed call takes (default: --step-duration)")
	durationFlag(fs, &d.Outage, "outage", 0, "how long the dependency is down")
	durationFlag(fs, &d.OutageAt, "at", 0, "when the outage begins, from the start of the job")
	fs.Float64Var(&d.ErrorRate, "error-rate", 1, "share of the calls that fail during the outage (0.3: a partial outage; 0 with --slow: slow only)")
	durationFlag(fs, &d.Ramp, "ramp", 0, "recovery: the error rate falls to 0 over this long after the outage")
	durationFlag(fs, &d.Slow, "slow", 0, "during the outage calls take this long (the step's timeout cuts them)")
	fs.StringVar(&d.Error, "error", "", `the failure's message, matched by retry_on (default "503 Service Unavailable")`)
	fs.IntVar(&d.ExitCode, "exit-code", simulate.DefaultExitCode, "exit status of a failed shell step")
	durationFlag(fs, &d.RetryAfter, "retry-after", 0, "failures are 429s whose handler returns retry.After(D) (Go handler steps)")
	var limitRate rateFlag
	fs.Var(&limitRate, "limit-rate", "the named limit the dependency's step names (limit: NAME): its rate, e.g. 40/s (an inline limit brings its own)")
	fs.IntVar(&cfg.Limit.Burst, "limit-burst", 0, "the named limit's burst (default: one second of --limit-rate)")
	fs.IntVar(&cfg.Limit.Concurrency, "limit-concurrency", 0, "the named limit's cap on calls in flight (0: none)")
	fs.BoolVar(&cfg.Limit.Adaptive, "limit-adaptive", false, "the named limit is adaptive (AIMD)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed (jitter, partial error rates): the same seed, the same run")
	durationFlag(fs, &cfg.Bucket, "bucket", simulate.DefaultBucket, "width of the time series")
	var compare, set listFlag
	fs.Var(&set, "set", "overrides of every run, the baseline's included, 'key=value; …' as --compare (repeatable)")
	baseName := fs.String("name", "baseline", "what tables and legends call the run of the job as written")
	fs.Var(&compare, "compare", "a variant to compare, 'key=value; …' (repeatable): retry_budget=5%, jitter=full, attempts=3, circuit_breaker=off, agents=8, …")
	plot := fs.String("plot", "", "write a chart of the calls per second to FILE (.svg or .png)")
	width := fs.Int("width", chart.DefaultWidth, "width of the terminal chart")
	asJSON := fs.Bool("json", false, "print the runs as JSON (durations in ms)")
	keys := fs.Bool("keys", false, "list the keys --compare understands")
	var settings budget.Settings
	budget.RegisterFlags(fs, &settings)
	beSettings, err := envflag.BestEffortFromEnv(env.getenv)
	if err != nil {
		errorf(env, "simulate: %v", err)
		return exitUsage
	}
	envflag.RegisterBestEffort(fs, &beSettings)

	// The operator's budget settings come from the environment, as the
	// coordinator's; flags override them.
	envSettings, err := budget.SettingsFromEnv(env.getenv)
	if err != nil {
		errorf(env, "simulate: %v", err)
		return exitUsage
	}
	settings = envSettings
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg.Limit.Rate = limitRate.r
	if *keys {
		for _, k := range simulate.VariantKeys() {
			fmt.Fprintln(env.stdout, k)
		}
		return exitOK
	}
	// Zero means "the default" in simulate.Config; on the command line the
	// defaults are the flags' own, so an explicit zero is a mistake.
	for _, z := range []struct {
		flag string
		zero bool
		want string
	}{
		{"--agents", cfg.Fleet.Agents == 0, ">= 1"},
		{"--concurrency", cfg.Fleet.Concurrency == 0, ">= 1"},
		{"--max-deliver", cfg.Fleet.MaxDeliver == 0, ">= 1, or -1 for unlimited"},
		{"--max-ack-pending", cfg.Fleet.MaxAckPending == 0, ">= 1, or -1 for unlimited"},
		{"--step-duration", cfg.Dependency.StepDuration == 0, "greater than 0"},
		{"--bucket", cfg.Bucket == 0, "greater than 0"},
	} {
		if z.zero {
			errorf(env, "simulate: %s: must be %s, got 0", z.flag, z.want)
			return exitUsage
		}
	}
	path, spec, ok := specArg(env, fs)
	if !ok {
		return exitUsage
	}
	cfg.Spec, cfg.Budget, cfg.BestEffort = spec, settings, beSettings
	if cfg.Dependency.Step, ok = simulateStep(env, spec, *step); !ok {
		return exitUsage
	}
	if *plot != "" && !strings.HasSuffix(*plot, ".svg") && !strings.HasSuffix(*plot, ".png") {
		errorf(env, "simulate: --plot %q: want a .svg or .png file", *plot)
		return exitUsage
	}
	if cfg.Items = *items; cfg.Items == 0 {
		if cfg.Items, ok = simulateItems(ctx, env, spec, path); !ok {
			return exitUsage
		}
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		simulateProblems(env, err)
		return exitUsage
	}

	for i, c := range set {
		var err error
		if _, cfg, err = simulateVariant(cfg, c); err != nil {
			errorf(env, "simulate: --set[%d] %q:", i+1, c)
			simulateProblems(env, err)
			return exitUsage
		}
	}
	runs := []*simulateRun{{Name: *baseName, cfg: cfg}}
	for i, c := range compare {
		v, vc, err := simulateVariant(cfg, c)
		if err != nil {
			errorf(env, "simulate: --compare[%d] %q:", i+1, c)
			simulateProblems(env, err)
			return exitUsage
		}
		runs = append(runs, &simulateRun{Name: v.Name, Overrides: v.Overrides, cfg: vc})
	}
	if err := simulateAll(ctx, runs); err != nil {
		errorf(env, "simulate: %v", err)
		return exitFailed
	}
	if *plot != "" {
		if err := writePlot(*plot, simulateChart(spec, &cfg, runs)); err != nil {
			errorf(env, "simulate: --plot: %v", err)
			return exitFailed
		}
	}
	if *asJSON {
		writeJSON(env.stdout, simulateJSON(spec, &cfg, settings, runs))
		return exitOK
	}
	printSimulation(env.stdout, spec, &cfg, runs, *width)
	if *plot != "" {
		fmt.Fprintf(env.stdout, "\nchart written to %s\n", *plot)
	}
	return exitOK
}

// simulateVariant parses a --set or --compare value and applies it to cfg.
func simulateVariant(cfg simulate.Config, s string) (simulate.Variant, simulate.Config, error) {
	v, err := simulate.ParseVariant(s)
	if err != nil {
		return v, cfg, err
	}
	if cfg, err = v.Apply(cfg); err != nil {
		return v, cfg, err
	}
	return v, cfg, cfg.WithDefaults().Validate()
}

// simulateStep resolves --step: a 1-based number or a step name.
func simulateStep(env *cliEnv, spec *messages.JobSpec, s string) (int, bool) {
	if s == "" {
		return 0, true
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > len(spec.AgentTemplate) {
			errorf(env, "simulate: --step %d: the job has %d step(s)", n, len(spec.AgentTemplate))
			return 0, false
		}
		return n - 1, true
	}
	names := make([]string, len(spec.AgentTemplate))
	for i, st := range spec.AgentTemplate {
		names[i] = stepName(spec, i)
		if st.Name == s || names[i] == s {
			return i, true
		}
	}
	errorf(env, "simulate: --step %q: no such step in agent_template (steps: %s)", s, strings.Join(names, ", "))
	return 0, false
}

func stepName(spec *messages.JobSpec, i int) string {
	if n := spec.AgentTemplate[i].Name; n != "" {
		return n
	}
	return fmt.Sprintf("step-%d", i+1)
}

// simulateItems counts the spec's items as the coordinator would.
func simulateItems(ctx context.Context, env *cliEnv, spec *messages.JobSpec, path string) (int64, bool) {
	if strings.HasPrefix(spec.Input, expand.ObjectStoreScheme) {
		errorf(env, "simulate: input: the items are in the object store: give their number with --items N")
		return 0, false
	}
	n, _, err := expand.Count(ctx, jobspec.WithDefaults(spec), expand.FileOpener(filepath.Dir(path)))
	if err != nil {
		p := validateItemsProblem(spec, err)
		errorf(env, "simulate: %s (or give their number with --items N)", p.Error())
		return 0, false
	}
	if n == 0 {
		errorf(env, "simulate: items: the job has no items (give their number with --items N)")
		return 0, false
	}
	return n, true
}

// simulateProblems prints a simulation's or a variant's problems, naming
// the flag behind each config field.
func simulateProblems(env *cliEnv, err error) {
	var ve *messages.ValidationError
	if !errors.As(err, &ve) {
		fmt.Fprintf(env.stderr, "  %v\n", err)
		return
	}
	for _, p := range ve.Problems {
		if f, ok := simulateFlagOf[p.Field]; ok && ve.Kind == simulate.KindSimulation {
			p.Field = fmt.Sprintf("%s (%s)", f, p.Field)
		}
		fmt.Fprintf(env.stderr, "  %s\n", p.Error())
	}
}

// simulateAll runs the simulations, as many at once as there are CPUs.
func simulateAll(ctx context.Context, runs []*simulateRun) error {
	sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.Result, errs[i] = simulate.Run(ctx, r.cfg)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", r.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func simulateJSON(spec *messages.JobSpec, cfg *simulate.Config, s budget.Settings, runs []*simulateRun) *simulateReport {
	s = s.Resolved() // a profile's values are settings too
	c := cfg.WithDefaults()
	d := c.Dependency
	rep := &simulateReport{
		Job: spec.ID, Items: c.Items, Seed: c.Seed,
		Fleet: simulateFleetJSON{Agents: c.Fleet.Agents, Concurrency: c.Fleet.Concurrency, Prefetch: c.Fleet.Prefetch,
			MaxDeliver: c.Fleet.MaxDeliver, MaxAckPending: c.Fleet.MaxAckPending, LocalRetryMaxMS: c.Fleet.LocalRetryMax.Milliseconds()},
		Dependency: simulateDepJSON{
			Step: d.Step, StepName: stepName(spec, d.Step), StepDurationMS: d.StepDuration.Milliseconds(),
			FailDurationMS: d.FailDuration.Milliseconds(), OutageAtMS: d.OutageAt.Milliseconds(), OutageMS: d.Outage.Milliseconds(),
			ErrorRate: d.ErrorRate, RampMS: d.Ramp.Milliseconds(), SlowMS: d.Slow.Milliseconds(), Error: d.Error,
			RetryAfterMS: d.RetryAfter.Milliseconds(),
		},
		Budget: map[string]*string{},
	}
	for k, v := range map[string]*messages.BudgetValue{
		budget.EnvDefault: s.Default, budget.EnvMax: s.Max, budget.EnvPerItemDefault: s.PerItemDefault, budget.EnvPerItemMax: s.PerItemMax,
	} {
		if v != nil {
			str := budget.FormatValue(v)
			rep.Budget[k] = &str
		}
	}
	for _, r := range runs {
		o := map[string]string{}
		for _, ov := range r.Overrides {
			o[ov.Key] = ov.Value
		}
		rep.Runs = append(rep.Runs, simulateRunJSON{Name: r.Name, Overrides: o, Result: r.Result})
	}
	return rep
}

// simulateChart is the chart of the runs' calls per second, on the widest
// bucket any run used.
func simulateChart(spec *messages.JobSpec, cfg *simulate.Config, runs []*simulateRun) chart.Chart {
	bucket := cfg.WithDefaults().Bucket
	for _, r := range runs {
		bucket = max(bucket, r.Result.Series.Bucket)
	}
	title := "calls per second to the dependency"
	if name := cmpOr(spec.Name, spec.ID); name != "" {
		title += " — " + name
	}
	c := chart.Chart{Title: title, YLabel: "calls/s", XLabel: "time since the job started", Step: bucket}
	for _, r := range runs {
		s := r.Result.Series
		k := int(bucket / s.Bucket)
		values := make([]float64, 0, len(s.Attempts)/k+1)
		for i := 0; i < len(s.Attempts); i += k {
			var n int64
			for j := i; j < i+k && j < len(s.Attempts); j++ {
				n += s.Attempts[j]
			}
			values = append(values, float64(n)/bucket.Seconds())
		}
		c.Series = append(c.Series, chart.Series{Name: r.Name, Values: values})
	}
	if d := cfg.Dependency; d.Outage > 0 {
		label := fmt.Sprintf("outage: %s of calls fail", percent(d.ErrorRate))
		if d.Slow > 0 {
			label = fmt.Sprintf("outage: calls take %s, %s fail", chart.FormatDuration(d.Slow), percent(d.ErrorRate))
		}
		c.Band = &chart.Band{From: d.OutageAt, To: d.OutageAt + d.Outage, Label: label}
	}
	return c
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func percent(f float64) string {
	return strconv.FormatFloat(f*100, 'f', -1, 64) + "%"
}

func writePlot(path string, c chart.Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if strings.HasSuffix(path, ".png") {
		err = chart.PNG(f, c)
	} else {
		err = chart.SVG(f, c)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// printSimulation writes the runs for people: what was simulated, the
// chart of the calls, and a table comparing the runs.
func printSimulation(w io.Writer, spec *messages.JobSpec, cfg *simulate.Config, runs []*simulateRun, width int) {
	c := cfg.WithDefaults()
	d := c.Dependency
	st := spec.AgentTemplate[d.Step]
	kind := "handler " + st.Handler
	if st.Shell != "" {
		kind = "shell"
	}
	fmt.Fprintf(w, "job %s: %s items on %d agent(s) × %d (prefetch %d); a step run takes %s\n",
		cmpOr(spec.ID, "(no id)"), group(c.Items), c.Fleet.Agents, c.Fleet.Concurrency, c.Fleet.Prefetch, chart.FormatDuration(d.StepDuration))
	fmt.Fprintf(w, "dependency: step %d %q (%s)", d.Step+1, stepName(spec, d.Step), kind)
	switch {
	case d.Outage <= 0:
		fmt.Fprintln(w, ": no outage")
	default:
		fmt.Fprintf(w, ": %s of calls fail (%q) for %s from %s", percent(d.ErrorRate), d.Error, chart.FormatDuration(d.Outage), chart.FormatDuration(d.OutageAt))
		if d.Slow > 0 {
			fmt.Fprintf(w, ", calls take %s", chart.FormatDuration(d.Slow))
		}
		if d.RetryAfter > 0 {
			fmt.Fprintf(w, ", Retry-After %s", chart.FormatDuration(d.RetryAfter))
		}
		if d.Ramp > 0 {
			fmt.Fprintf(w, ", recovering over %s", chart.FormatDuration(d.Ramp))
		}
		fmt.Fprintln(w)
	}
	if p, err := retry.NewPolicy(st.RetryConfig); err == nil {
		fmt.Fprintf(w, "retry:      %s\n", p)
	}
	b := runs[0].Result.Budget
	fmt.Fprintf(w, "budget:     %s retries for the job, at most %s per item\n\n", group(int64(b.Total)), group(int64(b.PerItemMax)))

	chart.Terminal(w, simulateChart(spec, cfg, runs), width, chart.DefaultHeight)
	fmt.Fprintln(w)
	printSimulationTable(w, runs)
}

// printSimulationTable compares the runs, one column each.
func printSimulationTable(w io.Writer, runs []*simulateRun) {
	header := []string{""}
	for _, r := range runs {
		header = append(header, r.Name)
	}
	table := [][]string{header}
	row := func(label string, cell func(r *simulate.Result) string) {
		line := []string{label}
		for _, r := range runs {
			line = append(line, cell(r.Result))
		}
		table = append(table, line)
	}
	anyRun := func(f func(r *simulate.Result) bool) bool {
		for _, r := range runs {
			if f(r.Result) {
				return true
			}
		}
		return false
	}
	row("calls to the dependency", func(r *simulate.Result) string { return group(r.Attempts) })
	row("  failed", func(r *simulate.Result) string { return group(r.Failures) })
	row("  per item (amplification)", func(r *simulate.Result) string { return fmt.Sprintf("%.2f", r.Amplification) })
	for i, name := range []string{"before the outage", "during the outage", "after the outage"} {
		if !anyRun(func(r *simulate.Result) bool { return len(r.Phases) > i && r.Phases[i].Items > 0 }) {
			continue
		}
		row("    "+name, func(r *simulate.Result) string {
			if len(r.Phases) <= i || r.Phases[i].Items == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", r.Phases[i].Amplification)
		})
	}
	row("  peak calls/s", func(r *simulate.Result) string {
		return fmt.Sprintf("%s at %s", chart.FormatNumber(r.PeakRate), chart.FormatDuration(r.PeakAt))
	})
	row("retries / job budget", func(r *simulate.Result) string {
		return fmt.Sprintf("%s/%s", group(r.Retries), group(int64(r.Budget.Total)))
	})
	row("  budget ran out at", func(r *simulate.Result) string {
		if !r.Budget.Exhausted {
			return "-"
		}
		return chart.FormatDuration(r.Budget.ExhaustedAt)
	})
	row("succeeded", func(r *simulate.Result) string { return group(r.Succeeded) })
	row("  recovered (failed, then ok)", func(r *simulate.Result) string { return group(r.Recovered) })
	row("dead-lettered", func(r *simulate.Result) string { return group(r.DeadLettered) })
	for _, reason := range simulateReasons(runs) {
		row("  "+reason, func(r *simulate.Result) string { return group(r.Reasons[reason]) })
	}
	for _, o := range []struct {
		label string
		get   func(r *simulate.Result) int64
	}{
		{"skipped", func(r *simulate.Result) int64 { return r.Skipped }},
		{"failed (custom)", func(r *simulate.Result) int64 { return r.Failed }},
		{"not run", func(r *simulate.Result) int64 { return r.NotRun }},
		{"parked by the breaker", func(r *simulate.Result) int64 { return r.Parked }},
		{"failed fast (step breaker)", func(r *simulate.Result) int64 { return r.FailedFast }},
		{"snoozed", func(r *simulate.Result) int64 { return r.Snoozes }},
	} {
		if anyRun(func(r *simulate.Result) bool { return o.get(r) > 0 }) {
			row(o.label, func(r *simulate.Result) string { return group(o.get(r)) })
		}
	}
	if anyRun(func(r *simulate.Result) bool { return r.Breaker != nil }) {
		row("breaker opened", func(r *simulate.Result) string {
			if r.Breaker == nil {
				return "-"
			}
			return fmt.Sprintf("%d× (%s open)", r.Breaker.Opened, chart.FormatDuration(r.Breaker.OpenFor))
		})
	}
	row("job ended at", func(r *simulate.Result) string { return chart.FormatDuration(r.Duration) })
	row("  state", func(r *simulate.Result) string { return r.State })
	row("  reason", func(r *simulate.Result) string { return r.Reason })

	widths := make([]int, len(header))
	for _, line := range table {
		for i, cell := range line {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	for _, line := range table {
		var b strings.Builder
		fmt.Fprintf(&b, "%-*s", widths[0], line[0])
		for i, cell := range line[1:] {
			fmt.Fprintf(&b, "  %*s", widths[i+1]+len(cell)-len([]rune(cell)), cell)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// simulateReasons are the dead-letter reasons of any run, most frequent
// (in the first run that has them) first.
func simulateReasons(runs []*simulateRun) []string {
	total := map[string]int64{}
	for _, r := range runs {
		for k, n := range r.Result.Reasons {
			total[k] += n
		}
	}
	return dlq.Top(total)
}

// group writes n with thousands separators: 1,234,567.
func group(n int64) string { return chart.FormatCount(n, ",") }
