package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "budget", summary: "print a job's retry budget: effective and requested values, consumed, exhausted", run: runBudget})
}

func runBudget(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "budget", func(ctx context.Context, client *client.Client, id string, asJSON bool) int {
		st, err := client.JobStatus(ctx, id)
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
	fmt.Fprintf(env.stdout, "job %s retry budget\n", st.ID)
	tw := newTable(env.stdout)
	total := strconv.Itoa(b.Total)
	if b.RequestedTotal != "" {
		total += fmt.Sprintf("   (requested %s)", cell(b.RequestedTotal))
	}
	fmt.Fprintf(tw, "  job total\t%s\n", total)
	perItem := "none (a step's attempts bound each item)"
	if b.PerItemMax > 0 {
		perItem = strconv.Itoa(b.PerItemMax)
		if b.RequestedPerItem != "" {
			perItem += fmt.Sprintf("   (requested %s)", cell(b.RequestedPerItem))
		}
	}
	fmt.Fprintf(tw, "  per item max\t%s\n", perItem)
	if b.ClampedBy != "" {
		fmt.Fprintf(tw, "  clamped by\t%s\n", cell(b.ClampedBy))
	}
	fmt.Fprintf(tw, "  consumed\t%d of %d (%d left)\n", b.Consumed, b.Total, max(0, b.Total-b.Consumed))
	fmt.Fprintf(tw, "  exhausted\t%v\n", b.Exhausted)
	fmt.Fprintf(tw, "  denied\t%d by the job budget, %d by the per-item cap\n", b.DeniedJob, b.DeniedItem)
	_ = tw.Flush()
}
