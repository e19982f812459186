package main

import (
	"context"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "budget", summary: "print a job's retry budget: effective and requested values, consumed, exhausted", run: runBudget})
}

func runBudget(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "budget", func(ctx context.Context, client *coordinator.Client, id string, asJSON bool) int {
		st, err := client.Status(ctx, id)
		if err != nil {
			errorf(env, "%v", err)
			return exitForAPIError(err)
		}
		printBudget(env, st, asJSON)
		return exitOK
	})
}

func printBudget(env *cliEnv, st *messages.JobStatus, asJSON bool) {
	b := st.Budget
	if asJSON {
		writeJSON(env.stdout, b)
		return
	}
	w := env.stdout
	fmt.Fprintf(w, "job %s retry budget\n", st.ID)
	fmt.Fprintf(w, "  job total      %d", b.Total)
	if b.RequestedTotal != "" {
		fmt.Fprintf(w, "   (requested %s)", b.RequestedTotal)
	}
	fmt.Fprintln(w)
	if b.PerItemMax > 0 {
		fmt.Fprintf(w, "  per item max   %d", b.PerItemMax)
		if b.RequestedPerItem != "" {
			fmt.Fprintf(w, "   (requested %s)", b.RequestedPerItem)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  per item max   none (a step's attempts bound each item)")
	}
	if b.ClampedBy != "" {
		fmt.Fprintf(w, "  clamped by     %s\n", b.ClampedBy)
	}
	fmt.Fprintf(w, "  consumed       %d of %d (%d left)\n", b.Consumed, b.Total, max(0, b.Total-b.Consumed))
	fmt.Fprintf(w, "  exhausted      %v\n", b.Exhausted)
	fmt.Fprintf(w, "  denied         %d by the job budget, %d by the per-item cap\n", b.DeniedJob, b.DeniedItem)
}
