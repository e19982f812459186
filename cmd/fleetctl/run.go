package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/examples"
	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/obs"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "run", summary: "run one job to completion with in-process agents", run: runRun})
	register(command{name: "demo", summary: "run the demo job on an embedded server and print a summary", run: runDemo})
}

func runRun(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "run", "run FILE [--agents N] [--profile NAME] [--server URL] [--json]")
	conn := addConnFlags(fs, env)
	agents := fs.Int("agents", 4, "number of in-process agents")
	conc := fs.Int("concurrency", 8, "items each agent runs at once")
	asJSON := fs.Bool("json", false, "print the final status as JSON")
	logLevel := fs.String("log-level", "warn", "log level of the in-process coordinator and agents")
	profile := fs.String("profile", "", "the job's profile: its values apply over env (profiles:)")
	var o localOptions
	// The coordinator's AD-44 settings, read as cmd/coordinator reads them.
	if err := envflag.Policy(fs, env.getenv, &o.budget, &o.bestEffort); err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if err := o.budget.Validate(); err != nil {
		errorf(env, "%v", err)
		return exitUsage
	}
	path, spec, ok := specArg(env, fs, *profile)
	if !ok {
		return exitUsage
	}
	if dir, err := filepath.Abs(filepath.Dir(path)); err == nil {
		o.secretDirs = []string{dir, "/"} // relative env files from the job file's directory
	}
	if *agents < 1 {
		errorf(env, "--agents: %d, want >= 1", *agents)
		return exitUsage
	}
	o.conn, o.agents, o.concurrency = conn, *agents, *conc
	if spec.Input != "" && expand.IsFileRef(spec.Input) && spec.Setup == nil { // a setup writes its input on an agent
		// The in-process coordinator reads the local file: its input
		// directory is the file's, as the job file names it (relative
		// paths from the job file's directory, absolute ones as they are).
		in := localInput(path, strings.TrimPrefix(spec.Input, expand.FileScheme))
		if real, err := filepath.EvalSymlinks(in); err == nil {
			in = real
		}
		o.inputDir, spec.Input = filepath.Dir(in), filepath.Base(in)
	}
	return hostAndRun(ctx, env, spec, o, *logLevel, *asJSON, false)
}

func runDemo(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "demo", "demo [--items N] [--agents N] [--json]")
	conn := addConnFlags(fs, env)
	items := fs.Int("items", 300, "number of demo items")
	agents := fs.Int("agents", 4, "number of in-process agents")
	asJSON := fs.Bool("json", false, "print the final status as JSON")
	logLevel := fs.String("log-level", "warn", "log level of the in-process coordinator and agents")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	data, err := examples.FS.ReadFile("demo.yaml")
	if err != nil {
		errorf(env, "%v", err)
		return exitFailed
	}
	spec, err := jobspec.Parse(data)
	if err != nil {
		printProblems(env, "demo.yaml", err)
		return exitFailed
	}
	spec.Items = nil
	for i := 1; i <= *items; i++ {
		raw, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("img-%04d", i), "path": fmt.Sprintf("photos/img-%04d.jpg", i)})
		spec.Items = append(spec.Items, raw)
	}
	spec.ID = fmt.Sprintf("demo-%d", time.Now().Unix())
	if !*asJSON {
		fmt.Fprintf(env.stdout, "jetfleet demo: %d items, %d agents, embedded JetStream server\n", *items, *agents)
		fmt.Fprintf(env.stdout, "steps: fetch (shell) -> resize (flaky: 35%% transient failures, 1.5%% permanent) -> publish\n\n")
	}
	code := hostAndRun(ctx, env, spec, localOptions{conn: conn, agents: *agents, concurrency: 8}, *logLevel, *asJSON, true)
	if code == exitFailed {
		code = exitOK // dead letters are part of the demo
	}
	return code
}

// hostAndRun starts a local fleet, submits spec, follows it to the end and
// prints the outcome.
func hostAndRun(ctx context.Context, env *cliEnv, spec *messages.JobSpec, o localOptions, logLevel string, asJSON, demo bool) int {
	log, err := obs.Logger(env.stderr, logLevel, true)
	if err != nil {
		errorf(env, "--log-level: %v", err)
		return exitUsage
	}
	o.logger = log
	start := time.Now()
	fleet, err := startLocalFleet(ctx, o)
	if err != nil {
		errorf(env, "starting the fleet: %v", err)
		return exitFailed
	}
	defer func() {
		if err := fleet.stop(); err != nil {
			errorf(env, "shutdown: %v", err)
		}
	}()
	reply, err := fleet.client.JobSubmitSpec(ctx, spec)
	if err != nil {
		printProblems(env, "job", err)
		return exitUsage
	}
	var prog *progress
	if !asJSON {
		prog = newProgress(env.stderr)
	}
	st, err := fleet.client.JobWait(ctx, reply.JobID, watchInterval, func(st *messages.JobStatus) {
		if prog != nil {
			prog.update(st)
		}
	})
	if prog != nil {
		prog.finish()
	}
	if err != nil {
		errorf(env, "waiting for %s: %v", reply.JobID, err)
		return exitFailed
	}
	showStatus(env, st, asJSON, time.Since(start))
	if demo && !asJSON {
		fmt.Fprintf(env.stdout, "\nThe demo ran on an embedded server that is gone now. Against a real fleet:\n"+
			"  go run ./cmd/coordinator &   go run ./cmd/agent &\n"+
			"  go run ./cmd/fleetctl submit examples/flaky.yaml --wait\n")
	}
	if st.State == messages.StateSucceeded {
		return exitOK
	}
	return exitFailed
}

func writeJSON(w io.Writer, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	_, _ = w.Write(buf.Bytes())
}

// showStatus prints st on stdout: as JSON, or as a summary that says how
// long the job took (took 0: not said).
func showStatus(env *cliEnv, st *messages.JobStatus, asJSON bool, took time.Duration) {
	if asJSON {
		writeJSON(env.stdout, st)
	} else {
		printSummary(env.stdout, st, took)
	}
}

// printSummary prints a finished job's status for people.
func printSummary(out io.Writer, st *messages.JobStatus, elapsed time.Duration) {
	w := newTable(out)
	defer w.Flush()
	fmt.Fprintf(w, "job %s: %s", st.ID, st.State)
	if st.PausedBy != "" {
		fmt.Fprintf(w, " (by its %s)", st.PausedBy)
	}
	if st.CompletionReason != "" {
		fmt.Fprintf(w, " (%s)", st.CompletionReason)
	}
	if elapsed > 0 {
		fmt.Fprintf(w, " in %s", elapsed.Round(10*time.Millisecond))
	}
	fmt.Fprintln(w)
	row := func(name string, v int64, extra string) {
		if extra == "" {
			fmt.Fprintf(w, "  %s\t%d\n", name, v)
		} else {
			fmt.Fprintf(w, "  %s\t%d\t%s\n", name, v, extra)
		}
	}
	for _, a := range st.Unreachable {
		fmt.Fprintf(w, "  unreachable agent %s: not heard from since %s (%s ago)\n", a.Name, a.Since.Format(time.RFC3339), time.Since(a.Since).Round(time.Second))
	}
	if st.Phase != "" && !messages.TerminalState(st.State) {
		fmt.Fprintf(w, "  phase\t%s\n", st.Phase)
	}
	if su := st.Setup; su != nil {
		line := su.State
		switch {
		case su.Step != "":
			line += " at step " + su.Step + ": " + oneLine(su.Error, 80)
		case su.Error != "":
			line += ": " + oneLine(su.Error, 80)
		case su.InputBytes > 0:
			line += fmt.Sprintf(", left %d bytes of input", su.InputBytes)
		}
		fmt.Fprintf(w, "  setup\t%s\n", line)
	}
	row("items", st.Items, "")
	row("succeeded", st.Succeeded, "")
	row("dead-lettered", st.DeadLettered, "")
	if st.Failed > 0 {
		row("failed", st.Failed, "")
	}
	if st.Skipped > 0 {
		row("skipped", st.Skipped, "")
	}
	if st.NotRun > 0 {
		row("not run", st.NotRun, "")
	}
	b := st.Budget
	budget := fmt.Sprintf("job budget %d/%d used", b.Consumed, b.Total)
	if b.PerItemMax > 0 {
		budget += fmt.Sprintf(", at most %d per item", b.PerItemMax)
	}
	if b.Exhausted {
		budget += ", EXHAUSTED"
	}
	row("retries", st.Retries, budget)
	if st.ItemRetries > 0 {
		row("item re-runs", st.ItemRetries, "failed items run again as a whole (error_policy.retry_config), among the retries")
	}
	if br := st.Breaker; br != nil {
		fmt.Fprintf(w, "  breaker\t%s\n", breakerLine(br))
	}
	if st.LateResults > 0 {
		row("late results", st.LateResults, "arrived after the map phase ended")
	}
	if be := st.BestEffort; be != nil {
		line := fmt.Sprintf("%d of %d groups completed, %d needed", be.GroupsCompleted, be.Groups, be.MinGroups)
		if be.Clamped != "" {
			line += " (" + be.Clamped + ")"
		}
		if be.Deadline != nil && !messages.TerminalState(st.State) {
			line += ", deadline " + be.Deadline.Local().Format("15:04:05")
		}
		fmt.Fprintf(w, "  best effort\t%s\n", line)
	}
	if g := st.Groups; len(g) > 0 && len(g) <= 20 {
		for _, name := range slices.Sorted(maps.Keys(g)) {
			gs := g[name]
			mark := ""
			if gs.Complete() {
				mark = " complete"
			}
			fmt.Fprintf(w, "    group %s\t%d/%d done, %d succeeded%s\n", cell(name), gs.Done, gs.Items, gs.Succeeded, mark)
		}
	}
	if rd := st.Reduce; rd != nil {
		line := rd.State
		if rd.Error != "" {
			line += ": " + oneLine(rd.Error, 80)
		} else if rd.Output != "" {
			line += ": " + oneLine(rd.Output, 80)
		}
		fmt.Fprintf(w, "  reduce\t%s\n", line)
	}
	if sum := st.Done(); sum != st.Items && messages.TerminalState(st.State) {
		fmt.Fprintf(w, "  WARNING: outcomes add up to %d of %d items\n", sum, st.Items)
	}
	if elapsed > 0 && st.Items > 0 {
		fmt.Fprintf(w, "  throughput\t%.0f\titems/s\n", float64(st.Done())/elapsed.Seconds())
	}
	if len(st.Errors) > 0 || st.ErrorsOther > 0 {
		fmt.Fprintln(w, "errors (by signature):")
		errs := append([]messages.ErrorSummary(nil), st.Errors...)
		slices.SortStableFunc(errs, func(a, b messages.ErrorSummary) int { return cmp.Compare(b.Count, a.Count) })
		for i, e := range errs {
			if i == 8 {
				fmt.Fprintf(w, "  … %d more\n", len(errs)-i)
				break
			}
			fmt.Fprintf(w, "  %d\t%s\t%s\n", e.Count, cell(e.Class), oneLine(e.Message, 90))
		}
		if st.ErrorsOther > 0 {
			fmt.Fprintf(w, "  %d\tother signatures (the report keeps the most frequent)\n", st.ErrorsOther)
		}
	}
	if st.DeadLettered > 0 {
		fmt.Fprintf(w, "dead letters (full history): fleetctl dlq list --job %s\n", st.ID)
		fmt.Fprintf(w, "once the cause is fixed:      fleetctl dlq replay --job %s\n", st.ID)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(w, "  problem: %s\n", cell(p.Error()))
	}
}

// breakerLine describes a job's circuit breaker in one line.
func breakerLine(br *messages.BreakerStatus) string {
	opened := "?"
	if br.OpenedAt != nil {
		opened = br.OpenedAt.Local().Format("2006-01-02 15:04:05.000")
	}
	switch br.State {
	case "open":
		return "OPEN since " + opened + ": items are parked"
	case "half_open":
		return fmt.Sprintf("HALF-OPEN (opened %s): %d probe(s) out, %d success(es)", opened, br.Probes, br.Successes)
	}
	if br.Failures > 0 {
		return fmt.Sprintf("%s, %d consecutive failure(s)", br.State, br.Failures)
	}
	return br.State
}

// oneLine folds s's white space and cuts it to n characters.
func oneLine(s string, n int) string {
	return cut(cell(strings.Join(strings.Fields(s), " ")), n)
}

// printProblems prints an error, one line per validation problem.
func printProblems(env *cliEnv, what string, err error) {
	var ve *messages.ValidationError
	var ae *messages.APIError
	switch {
	case errorsAs(err, &ve):
		errorf(env, "%s: %d problem(s):", what, len(ve.Problems))
		for _, p := range ve.Problems {
			fmt.Fprintf(env.stderr, "  %s\n", p.Error())
		}
	case errorsAs(err, &ae) && len(ae.Problems) > 0:
		errorf(env, "%s: %d problem(s):", what, len(ae.Problems))
		for _, p := range ae.Problems {
			fmt.Fprintf(env.stderr, "  %s\n", p.Error())
		}
	default:
		errorf(env, "%s: %v", what, err)
	}
}
