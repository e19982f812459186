package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "jobs", summary: "job housekeeping: prune (fleetctl jobs -h)", run: runJobs})
}

func runJobs(ctx context.Context, env *cliEnv, args []string) int {
	switch {
	case len(args) > 0 && args[0] == "prune":
		return runPrune(ctx, env, args[1:])
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		jobsUsage(env.stdout)
		return exitOK
	case len(args) > 0:
		errorf(env, "jobs: unknown command %q (prune)", args[0])
	}
	jobsUsage(env.stderr)
	return exitUsage
}

func jobsUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fleetctl jobs prune [--older-than D] [--dry-run] [--json]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  prune    delete the records of jobs that finished at least --older-than ago (default: the")
	fmt.Fprintln(w, "           coordinator's job retention, 7d unless configured), with what is left of their data")
}

// pruneTimeout is the least time a prune request is given: it deletes
// each job's data in turn.
const pruneTimeout = 5 * time.Minute

func runPrune(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "jobs prune", "jobs prune [--older-than D] [--dry-run] [--json]", withJSON)
	fs := c.fs
	var olderThan messages.Duration
	fs.TextVar(&olderThan, "older-than", messages.Duration(0), "prune jobs that finished at least this long ago: 36h, 7d (default: the coordinator's job retention)")
	dryRun := fs.Bool("dry-run", false, "only list the jobs that would be pruned")
	if code, ok := c.parse(args, anyArgs); !ok {
		return code
	}
	var req messages.PruneRequest
	req.DryRun = *dryRun
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "older-than" {
			req.OlderThan = &olderThan
		}
	})
	c.minTimeout = pruneTimeout
	defer c.close()
	reply, code := call(ctx, c, func(ctx context.Context, client *client.Client) (*messages.PruneReply, error) {
		return client.JobPrune(ctx, req)
	})
	if code != exitOK {
		return code
	}
	if !c.printedJSON(reply) {
		verb := "pruned"
		if reply.DryRun {
			verb = "would prune"
		}
		for _, id := range reply.Jobs {
			fmt.Fprintln(env.stdout, cell(id))
		}
		fmt.Fprintf(env.stderr, "%s %d jobs", verb, reply.Pruned)
		if len(reply.Jobs) < reply.Pruned {
			fmt.Fprintf(env.stderr, " (%d listed)", len(reply.Jobs))
		}
		fmt.Fprintln(env.stderr)
		if reply.Failed > 0 {
			fmt.Fprintf(env.stderr, "%d jobs could not be pruned; the coordinator's log says why, and its next retention pass tries again\n", reply.Failed)
		}
	}
	if reply.Failed > 0 {
		return exitFailed
	}
	return exitOK
}
