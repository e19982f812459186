package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "pause", summary: "pause a job: no new step starts, running steps finish (resume JOB goes on)", run: runPause})
	register(command{name: "resume", summary: "resume a paused job", run: runResume})
	register(command{name: "pool", summary: "pool pause|resume POOL: pause or resume every job of a pool", run: runPool})
}

func runPause(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "pause", func(ctx context.Context, client *client.Client, id string, asJSON bool) int {
		return showPaused(env, asJSON)(client.JobPause(ctx, id))
	})
}

func runResume(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "resume", func(ctx context.Context, client *client.Client, id string, asJSON bool) int {
		return showPaused(env, asJSON)(client.JobResume(ctx, id))
	})
}

// showPaused prints what pause or resume answered.
func showPaused(env *cliEnv, asJSON bool) func(*messages.JobStatus, error) int {
	return func(st *messages.JobStatus, err error) int {
		if err != nil {
			errorf(env, "%v", err)
			return exitForAPIError(err)
		}
		showStatus(env, st, asJSON, 0)
		return exitOK
	}
}

// poolCommands are the subcommands of "fleetctl pool".
var poolCommands = map[string]func(*client.Client, context.Context, string) (*messages.PoolPauseReply, error){
	"pause":  (*client.Client).PoolPause,
	"resume": (*client.Client).PoolResume,
}

func runPool(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := env.stderr
		if len(args) > 0 {
			w = env.stdout
		}
		fmt.Fprintln(w, "usage: fleetctl pool <command> POOL [--json]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "  pause    pause every job of the pool: no new step starts on it, running steps finish")
		fmt.Fprintln(w, "  resume   resume the pool")
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	req, ok := poolCommands[args[0]]
	if !ok {
		errorf(env, "pool: unknown command %q (pause, resume)", args[0])
		return exitUsage
	}
	name := "pool " + args[0]
	c := newFleetCmd(env, name, name+" POOL [--json]", withJSON)
	if code, ok := c.parse(args[1:], 1); !ok {
		return code
	}
	defer c.close()
	reply, code := call(ctx, c, func(ctx context.Context, client *client.Client) (*messages.PoolPauseReply, error) {
		return req(client, ctx, c.fs.Arg(0))
	})
	if code != exitOK || c.printedJSON(reply) {
		return code
	}
	if reply.Paused {
		since := ""
		if reply.Since != nil {
			since = " since " + reply.Since.Format(time.RFC3339)
		}
		fmt.Fprintf(env.stdout, "pool %s: paused%s\n", reply.Pool, since)
	} else {
		fmt.Fprintf(env.stdout, "pool %s: running\n", reply.Pool)
	}
	return exitOK
}
