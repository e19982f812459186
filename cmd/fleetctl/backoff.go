package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "backoff", summary: "backoff plan --config FILE: the delays a retry_config gives", run: runBackoff})
}

const backoffUsage = "backoff plan --config FILE [--json] [--seed N] [--run-time D] [--agent-timeout D]"

// backoffPlanJSON is the --json output of `backoff plan` (docs/contract.md §7).
type backoffPlanJSON struct {
	DelaysMS     []int64 `json:"delays_ms"`
	TotalDelayMS int64   `json:"total_delay_ms"`
	Retries      int     `json:"retries"`
	StoppedBy    string  `json:"stopped_by"`
	// ElapsedMS is the wall-clock time of the timeline, runs included;
	// printed with --run-time or --agent-timeout.
	ElapsedMS *int64 `json:"elapsed_ms,omitempty"`
}

func runBackoff(_ context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] != "plan" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintf(env.stdout, "usage: fleetctl %s\n", backoffUsage)
			return exitOK
		}
		fmt.Fprintf(env.stderr, "usage: fleetctl %s\n", backoffUsage)
		return exitUsage
	}
	fs := newFlagSet(env, "backoff plan", backoffUsage)
	configPath := fs.String("config", "", "retry_config document, YAML or JSON (optionally wrapped as {retry_config: …})")
	asJSON := fs.Bool("json", false, `print {"delays_ms", "total_delay_ms", "retries", "stopped_by"}`)
	seed := fs.Uint64("seed", 0, "apply the configured jitter with this random seed (default: no jitter)")
	var opts retry.PlanOptions
	durationFlag(fs, &opts.RunTime, "run-time", 0, "each run takes this long before it fails (it does not change what retry_budget allows)")
	durationFlag(fs, &opts.AgentTimeout, "agent-timeout", 0, "the job's agent_timeout: runs and delays together end the item when it is up")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if opts.RunTime < 0 || opts.AgentTimeout < 0 {
		fmt.Fprintln(env.stderr, "fleetctl backoff plan: --run-time and --agent-timeout must not be negative")
		return exitUsage
	}
	seeded := false
	fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	if *configPath == "" || fs.NArg() != 0 {
		fs.Usage()
		return exitUsage
	}
	data, err := os.ReadFile(*configPath)
	if err != nil {
		fmt.Fprintf(env.stderr, "fleetctl backoff plan: %v\n", err)
		return exitUsage
	}
	cfg, err := jobspec.ParseRetryConfig(data)
	if err == nil {
		var p *retry.Policy
		if p, err = retry.NewPolicy(cfg); err == nil {
			return printBackoffPlan(env.stdout, p, opts, *asJSON, seeded, *seed)
		}
	}
	fmt.Fprintf(env.stderr, "fleetctl backoff plan: %s: invalid retry config:\n", *configPath)
	for _, p := range backoffProblems(err) {
		fmt.Fprintf(env.stderr, "  %s\n", p)
	}
	return exitUsage
}

// backoffProblems lists the problems of a parse or policy error, one per field.
func backoffProblems(err error) []string {
	var ve *messages.ValidationError
	if errors.As(err, &ve) && len(ve.Problems) > 0 {
		out := make([]string, len(ve.Problems))
		for i, p := range ve.Problems {
			out[i] = p.Error()
		}
		return out
	}
	var ce *retry.ConfigError
	if errors.As(err, &ce) && len(ce.Problems) > 0 {
		out := make([]string, len(ce.Problems))
		for i, p := range ce.Problems {
			out[i] = p.Error()
		}
		return out
	}
	return []string{err.Error()}
}

// cappedInitial is the warning for an initial delay above max_delay: the
// config is valid, but every delay is capped at max_delay.
func cappedInitial(p *retry.Policy) string {
	if p.Strategy() == messages.BackoffCustom || p.InitialDelay() <= p.MaxDelay() {
		return ""
	}
	return fmt.Sprintf("warning: initial delay %s is greater than max_delay %s: every delay is capped at %s",
		backoffDur(p.InitialDelay()), backoffDur(p.MaxDelay()), backoffDur(p.MaxDelay()))
}

func printBackoffPlan(w io.Writer, p *retry.Policy, o retry.PlanOptions, asJSON, seeded bool, seed uint64) int {
	var plan retry.Plan
	if seeded {
		plan = p.PlanWith(retry.NewRand(seed), o)
	} else {
		plan = p.WithoutJitter().PlanWith(nil, o)
	}
	timed := o.RunTime > 0 || o.AgentTimeout > 0
	if asJSON {
		out := backoffPlanJSON{DelaysMS: make([]int64, len(plan.Delays)), Retries: len(plan.Delays), StoppedBy: plan.StoppedBy}
		for i, d := range plan.Delays {
			out.DelaysMS[i] = backoffMS(d)
			out.TotalDelayMS += out.DelaysMS[i]
		}
		if timed {
			ms := backoffMS(plan.Elapsed)
			out.ElapsedMS = &ms
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(w, "%s\n", b)
		return exitOK
	}
	writeBackoffTable(w, p, o, plan, seeded, seed)
	return exitOK
}

// backoffMS is d in milliseconds, rounded to the nearest.
func backoffMS(d time.Duration) int64 { return int64(d.Round(time.Millisecond) / time.Millisecond) }

// backoffBarWidth is the length of the longest bar of the chart.
const backoffBarWidth = 40

// writeBackoffTable prints the policy, a table of retries (delay, cumulative
// delay and a bar proportional to the delay) and what stops the retries.
// Long plans show their first 20 and last 5 retries.
func writeBackoffTable(w io.Writer, p *retry.Policy, o retry.PlanOptions, plan retry.Plan, seeded bool, seed uint64) {
	fmt.Fprintf(w, "policy:  %s\n", p)
	if o.RunTime > 0 || o.AgentTimeout > 0 {
		at := "none"
		if o.AgentTimeout > 0 {
			at = backoffDur(o.AgentTimeout)
		}
		fmt.Fprintf(w, "runs:    %s each, agent_timeout %s\n", backoffDur(o.RunTime), at)
	}
	if warn := cappedInitial(p); warn != "" {
		fmt.Fprintln(w, warn)
	}
	switch {
	case p.JitterMode() == "":
	case seeded:
		fmt.Fprintf(w, "jitter:  %s, seed %d\n", p.JitterMode(), seed)
	default:
		fmt.Fprintln(w, "jitter:  not applied (pass --seed N to apply it)")
	}
	fmt.Fprintln(w)
	if len(plan.Delays) == 0 {
		fmt.Fprintln(w, "no retries: the first run is the only attempt")
	} else {
		var longest time.Duration
		for _, d := range plan.Delays {
			longest = max(longest, d)
		}
		fmt.Fprintf(w, "%5s  %12s  %12s\n", "retry", "delay", "cumulative")
		var cum time.Duration
		for i, d := range plan.Delays {
			cum += d
			n := i + 1
			if len(plan.Delays) > 30 && n > 20 && n <= len(plan.Delays)-5 {
				if n == 21 {
					fmt.Fprintf(w, "%5s  %12s  %12s\n", "…", fmt.Sprintf("(%d more)", len(plan.Delays)-25), "")
				}
				continue
			}
			fmt.Fprintf(w, "%5d  %12s  %12s  %s\n", n, backoffDur(d), backoffDur(cum), backoffBar(d, longest))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "retries: %d, total delay %s\n", len(plan.Delays), backoffDur(plan.Total))
	if o.RunTime > 0 || o.AgentTimeout > 0 {
		fmt.Fprintf(w, "elapsed: %s, runs included\n", backoffDur(plan.Elapsed))
	}
	if o.AgentTimeout > plan.Total {
		fmt.Fprintf(w, "the delays use %s of the agent_timeout (%s), leaving %s for the runs\n",
			backoffDur(plan.Total), backoffDur(o.AgentTimeout), backoffDur(o.AgentTimeout-plan.Total))
	}
	switch plan.StoppedBy {
	case messages.ReasonAgentTimeout:
		if plan.Refused > 0 {
			fmt.Fprintf(w, "stopped by: agent_timeout (%s): retry %d would come back at %s, with the time up\n",
				backoffDur(o.AgentTimeout), len(plan.Delays)+1, backoffDur(plan.Elapsed+plan.Refused))
			break
		}
		fmt.Fprintf(w, "stopped by: agent_timeout (%s): run %d is cut at %s\n", backoffDur(o.AgentTimeout), len(plan.Delays)+1, backoffDur(plan.Elapsed))
	case messages.ReasonRetryBudget:
		budget, _ := p.Budget()
		if plan.Total >= budget {
			fmt.Fprintf(w, "stopped by: retry_budget (%s): spent\n", backoffDur(budget))
			break
		}
		fmt.Fprintf(w, "stopped by: retry_budget (%s): retry %d would wait %s, taking the total to %s > %s\n",
			backoffDur(budget), len(plan.Delays)+1, backoffDur(plan.Refused), backoffDur(plan.Total+plan.Refused), backoffDur(budget))
	default:
		fmt.Fprintf(w, "stopped by: attempts (%d = the first run + %d retries)\n", p.Attempts(), p.Attempts()-1)
	}
}

// backoffDur formats d to the millisecond: humantime for whole seconds
// ("1m30s"), decimal seconds otherwise ("3.083s", "1m5.5s").
func backoffDur(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d%time.Second == 0 {
		return messages.Duration(d).String()
	}
	return d.String()
}

// backoffBar is a horizontal bar of d relative to longest (at least one cell when d > 0).
func backoffBar(d, longest time.Duration) string {
	if longest <= 0 || d <= 0 {
		return ""
	}
	n := int(float64(d) / float64(longest) * backoffBarWidth)
	return strings.Repeat("█", max(n, 1))
}
