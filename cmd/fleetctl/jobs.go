package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "submit", summary: "submit a job through the API (--wait follows it)", run: runSubmit})
	register(command{name: "status", summary: "print a job's status", run: runStatus})
	register(command{name: "watch", summary: "follow a job with a live progress bar until it ends", run: runWatch})
	register(command{name: "cancel", summary: "cancel a running job (--kill: terminate its running steps too)", run: runCancel})
	register(command{name: "list", summary: "list jobs", run: runList})
}

// exitForAPIError maps an API error to an exit code: 2 for bad input.
func exitForAPIError(err error) int {
	var ae *messages.APIError
	if errors.As(err, &ae) {
		switch ae.Code {
		case messages.CodeBadRequest, messages.CodeInvalid, messages.CodeNotFound, messages.CodeTooLarge:
			return exitUsage
		}
	}
	return exitFailed
}

func runSubmit(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "submit", "submit FILE [--wait] [--profile NAME] [--json]", withJSON)
	wait := c.fs.Bool("wait", false, "follow the job until it ends; exit 1 unless it succeeded")
	profile := c.fs.String("profile", "", "the job's profile: its values apply over env (profiles:)")
	if code, ok := c.parse(args, anyArgs); !ok {
		return code
	}
	path, spec, ok := specArg(env, c.fs, *profile)
	if !ok {
		return exitUsage
	}
	// The upload and --wait take as long as they take: only the submit
	// request is bounded.
	c.untimed = true
	return c.run(ctx, func(ctx context.Context, client *client.Client) int {
		// A setup writes its input on an agent: nothing to upload.
		if spec.Input != "" && !strings.Contains(spec.Input, "://") && spec.Setup == nil {
			ref, digest, err := uploadInput(ctx, c.nc, c.conn.prefix, c.conn.JSDomain, localInput(path, spec.Input))
			if err != nil {
				errorf(env, "uploading input %s: %v", spec.Input, err)
				return exitFailed
			}
			spec.Input, spec.InputDigest = ref, digest
		}
		body, _ := json.Marshal(spec)
		rctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
		reply, err := client.JobSubmit(rctx, body)
		cancel()
		if err != nil {
			printProblems(env, path, err)
			return exitForAPIError(err)
		}
		if *wait {
			return watchJob(ctx, env, client, reply.JobID, c.asJSON())
		}
		if c.printedJSON(reply) {
			return exitOK
		}
		if reply.Existing {
			fmt.Fprintf(env.stdout, "%s (already submitted, %s)\n", reply.JobID, reply.State)
		} else {
			fmt.Fprintln(env.stdout, reply.JobID)
		}
		return exitOK
	})
}

// localInput is the file a job file's input names: an absolute path as it
// is, a relative one from the job file's directory.
func localInput(specPath, input string) string {
	if filepath.IsAbs(input) {
		return input
	}
	return filepath.Join(filepath.Dir(specPath), input)
}

// uploadInput stores a local input file in the uploads bucket under a name
// unique to this submission, and returns its objstore:// reference and
// digest. The coordinator copies it to a bucket only it writes when it
// accepts the job, after checking the digest, so no later upload (with
// the same job id or not) changes this job's items.
func uploadInput(ctx context.Context, nc *nats.Conn, prefix, domain, path string) (ref, digest string, err error) {
	names, err := messages.NewNames(prefix)
	if err != nil {
		return "", "", err
	}
	js, err := natsconn.JetStream(nc, domain)
	if err != nil {
		return "", "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	name := strings.ToLower(nuid.Next()) + "/" + filepath.Base(path)
	info, err := upload.Put(ctx, js, names.UploadsBucket(), name, f)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return "", "", fmt.Errorf("%w (has a coordinator of this version run with --prefix %s?)", err, prefix)
	}
	if err != nil {
		return "", "", err
	}
	return expand.ObjectStoreScheme + names.UploadsBucket() + "/" + name, info.Digest, nil
}

// jobCall is what a one-job command does once connected: it returns the
// exit code.
type jobCall func(ctx context.Context, client *client.Client, id string, asJSON bool) int

// runJobCommand parses "NAME JOB [--json]" plus the connection flags,
// connects, and runs call with a request timeout.
func runJobCommand(ctx context.Context, env *cliEnv, args []string, name string, call jobCall) int {
	c := newFleetCmd(env, name, name+" JOB [--json]", withJSON)
	if code, ok := c.parse(args, 1); !ok {
		return code
	}
	c.untimed = name == "watch" // watch follows the job for as long as it runs
	return c.run(ctx, func(ctx context.Context, client *client.Client) int {
		return call(ctx, client, c.fs.Arg(0), c.asJSON())
	})
}

func runStatus(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "status", func(ctx context.Context, client *client.Client, id string, asJSON bool) int {
		st, err := client.JobStatus(ctx, id)
		if err != nil {
			errorf(env, "%v", err)
			return exitForAPIError(err)
		}
		var took time.Duration
		if st.StartedAt != nil && st.FinishedAt != nil {
			took = st.FinishedAt.Sub(*st.StartedAt)
		}
		showStatus(env, st, asJSON, took)
		if st.State == messages.StateFailed || st.State == messages.StateRejected {
			return exitFailed
		}
		return exitOK
	})
}

func runWatch(ctx context.Context, env *cliEnv, args []string) int {
	return runJobCommand(ctx, env, args, "watch", func(ctx context.Context, client *client.Client, id string, asJSON bool) int {
		return watchJob(ctx, env, client, id, asJSON)
	})
}

// watchInterval is how often watch and submit --wait refresh the progress
// bar. The end is not learned from it: Client.Wait hears the job's
// completed event and reports the end at once.
const watchInterval = 500 * time.Millisecond

func watchJob(ctx context.Context, env *cliEnv, client *client.Client, id string, asJSON bool) int {
	start := time.Now()
	prog := newProgress(env.stderr)
	st, err := client.JobWait(ctx, id, watchInterval, prog.update)
	prog.finish()
	if err != nil {
		errorf(env, "watching %s: %v", id, err)
		return exitFailed
	}
	showStatus(env, st, asJSON, time.Since(start))
	if st.State == messages.StateSucceeded {
		return exitOK
	}
	return exitFailed
}

func runCancel(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "cancel", "cancel JOB [--kill] [--json]", withJSON)
	kill := c.fs.Bool("kill", false, "terminate the job's running steps on every agent (SIGTERM to a shell step's process group, SIGKILL after the agent's kill grace; a handler's context is cancelled) instead of letting them finish")
	if code, ok := c.parse(args, 1); !ok {
		return code
	}
	var opts []client.CancelOption
	if *kill {
		opts = append(opts, client.WithKill())
	}
	defer c.close()
	st, code := call(ctx, c, func(ctx context.Context, client *client.Client) (*messages.JobStatus, error) {
		return client.JobCancel(ctx, c.fs.Arg(0), opts...)
	})
	if code != exitOK {
		return code
	}
	showStatus(env, st, c.asJSON(), 0)
	return exitOK
}

func runList(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "list", "list [--state S] [--pool P] [--text T] [--limit N] [--cursor C] [--json]", withJSON)
	fs := c.fs
	var req messages.ListRequest
	fs.StringVar(&req.State, "state", "", "only jobs in this state")
	fs.StringVar(&req.Pool, "pool", "", "only jobs of this pool")
	fs.StringVar(&req.Text, "text", "", "only jobs whose id or name contains this (any case)")
	fs.IntVar(&req.Limit, "limit", 50, fmt.Sprintf("at most this many jobs (1 to %d)", coordinator.MaxListLimit))
	fs.StringVar(&req.Cursor, "cursor", "", "go on after an earlier page (the cursor it printed)")
	if code, ok := c.parse(args, anyArgs); !ok {
		return code
	}
	defer c.close()
	page, code := call(ctx, c, func(ctx context.Context, client *client.Client) (*messages.ListReply, error) {
		return client.JobListPage(ctx, req)
	})
	if code != exitOK {
		return code
	}
	if !c.printedJSON(page.Jobs) {
		printJobList(env.stdout, page.Jobs)
	}
	if page.NextCursor != "" {
		fmt.Fprintf(env.stderr, "more: fleetctl list --cursor %s\n", page.NextCursor)
	}
	return exitOK
}

// printJobList prints one line per job.
func printJobList(w io.Writer, jobs []messages.JobStatus) {
	tw := newTable(w)
	fmt.Fprintln(tw, "JOB\tSTATE\tITEMS\tSUCCEEDED\tDLQ\tRETRIES\tSUBMITTED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", cell(j.ID), j.State, j.Items, j.Succeeded, j.DeadLettered, j.Retries, j.SubmittedAt.Format(time.RFC3339))
	}
	_ = tw.Flush()
}
