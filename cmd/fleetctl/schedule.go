package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/schedule"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "schedule", summary: "cron and interval schedules: add, list, get, pause, resume, trigger, rm (fleetctl schedule -h)", run: scheduleFamily.run})
}

// scheduleFamily is "fleetctl schedule".
var scheduleFamily = &family{
	name: "schedule", usage: "schedule <command> [flags]", width: 8, names: "add, list, get, pause, resume, trigger, rm",
	cmds: []command{
		{name: "add", summary: "add NAME JOB.yaml (--cron EXPR | --every DUR) [--tz ZONE] [--overlap skip|queue|allow] [--catchup DUR]", run: runScheduleAdd},
		{name: "list", summary: "the schedules: timing, next run, last run, skipped ticks", run: runScheduleList},
		{name: "get", summary: "get NAME: next run, last runs with their jobs' states, skipped ticks with reasons", run: scheduleOne("get")},
		{name: "pause", summary: "pause NAME: its ticks stop firing", run: scheduleOne("pause")},
		{name: "resume", summary: "resume NAME: its ticks fire again from the next one", run: scheduleOne("resume")},
		{name: "trigger", summary: "trigger NAME: start a run now", run: scheduleOne("trigger")},
		{name: "rm", summary: "rm NAME: delete the schedule (its runs' jobs stay)", run: scheduleOne("rm")},
	},
}

// durationFlag is an optional humantime duration flag.
type optDuration struct {
	d   messages.Duration
	set bool
}

func (f *optDuration) String() string {
	if !f.set {
		return ""
	}
	return f.d.String()
}

func (f *optDuration) Set(s string) error {
	if err := f.d.UnmarshalText([]byte(s)); err != nil {
		return err
	}
	f.set = true
	return nil
}

func runScheduleAdd(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "schedule add", "schedule add NAME JOB.yaml (--cron EXPR | --every DUR) [--tz ZONE] [--overlap skip|queue|allow] [--catchup DUR] [--json]", withJSON)
	fs := c.fs
	cronExpr := fs.String("cron", "", "cron expression: 5 fields, 6 with seconds first, or @daily, @hourly, ...")
	var every, catchup optDuration
	fs.Var(&every, "every", "fixed interval (e.g. 30s, 1h), from the schedule's creation")
	tz := fs.String("tz", "", "time zone of --cron (IANA name, e.g. Europe/Berlin); default UTC")
	overlap := fs.String("overlap", messages.OverlapSkip, "a tick while the previous run runs: skip, queue or allow")
	fs.Var(&catchup, "catchup", "how late a missed tick still fires (default 1h; only the most recent)")
	if code, ok := c.parse(args, 2); !ok {
		return code
	}
	name := fs.Arg(0)
	sub := flag.NewFlagSet("", flag.ContinueOnError)
	_ = sub.Parse([]string{fs.Arg(1)})
	path, spec, ok := specArg(env, sub)
	if !ok {
		return exitUsage
	}
	if spec.Input != "" && !strings.Contains(spec.Input, "://") {
		errorf(env, "%s: input: a schedule's input must be a stored object (objstore://…); a local file is not kept for later runs", path)
		return exitUsage
	}
	job, _ := json.Marshal(spec)
	req := messages.ScheduleSpec{Name: name, Cron: *cronExpr, Every: every.d, TZ: *tz, Overlap: *overlap, Job: job}
	if catchup.set {
		req.Catchup = &catchup.d
	}
	return c.run(ctx, func(ctx context.Context, client *client.Client) int {
		s, err := client.ScheduleAdd(ctx, req)
		if err != nil {
			printProblems(env, "schedule "+name, err)
			return exitForAPIError(err)
		}
		if !c.printedJSON(s) {
			fmt.Fprintf(env.stdout, "schedule %s added; next run %s\n", s.Name, nextRun(s))
		}
		return exitOK
	})
}

// scheduleOne is a subcommand on one schedule: get, pause, resume,
// trigger, rm.
func scheduleOne(verb string) func(ctx context.Context, env *cliEnv, args []string) int {
	return func(ctx context.Context, env *cliEnv, args []string) int {
		c := newFleetCmd(env, "schedule "+verb, "schedule "+verb+" NAME [--json]", withJSON)
		if code, ok := c.parse(args, 1); !ok {
			return code
		}
		name := c.fs.Arg(0)
		return c.run(ctx, func(ctx context.Context, client *client.Client) int {
			var s *messages.Schedule
			var err error
			switch verb {
			case "get":
				s, err = client.ScheduleGet(ctx, name)
			case "pause":
				s, err = client.SchedulePause(ctx, name)
			case "resume":
				s, err = client.ScheduleResume(ctx, name)
			case "trigger":
				var id string
				if id, err = client.ScheduleTrigger(ctx, name); err == nil {
					if !c.printedJSON(map[string]string{"job_id": id}) {
						fmt.Fprintln(env.stdout, id)
					}
					return exitOK
				}
			case "rm":
				if err = client.ScheduleRemove(ctx, name); err == nil {
					if !c.printedJSON(map[string]string{"removed": name}) {
						fmt.Fprintf(env.stdout, "schedule %s removed\n", name)
					}
					return exitOK
				}
			}
			if err != nil {
				return c.apiFailed(err)
			}
			if !c.printedJSON(s) {
				printSchedule(env, s)
			}
			return exitOK
		})
	}
}

func runScheduleList(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "schedule list", "schedule list [--json]", withJSON)
	if code, ok := c.parse(args, 0); !ok {
		return code
	}
	defer c.close()
	list, code := call(ctx, c, func(ctx context.Context, client *client.Client) ([]messages.Schedule, error) {
		return client.ScheduleList(ctx)
	})
	if code != exitOK || c.printedJSON(list) {
		return code
	}
	tw := newTable(env.stdout)
	fmt.Fprintln(tw, "NAME\tTIMING\tNEXT RUN\tLAST RUN\tFIRED\tSKIPPED")
	for i := range list {
		s := &list[i]
		last := "-"
		if n := len(s.Runs); n > 0 {
			last = s.Runs[n-1].JobID + " (" + s.Runs[n-1].State + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", cell(s.Name), cell(timingText(s)), nextRun(s), cell(last), s.Fired, skippedTotal(s))
	}
	_ = tw.Flush()
	return exitOK
}

func timingText(s *messages.Schedule) string {
	if s.Cron != "" {
		tz := s.TZ
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("cron %q %s", s.Cron, tz)
	}
	return "every " + s.Every.String()
}

func nextRun(s *messages.Schedule) string {
	switch {
	case s.Paused:
		return "paused"
	case s.NextRun == nil:
		return "-"
	}
	return s.NextRun.Format(time.RFC3339)
}

func skippedTotal(s *messages.Schedule) int64 {
	var n int64
	for _, v := range s.Skipped {
		n += v
	}
	return n
}

func printSchedule(env *cliEnv, s *messages.Schedule) {
	w := env.stdout
	tw := newTable(w)
	fmt.Fprintf(tw, "schedule\t%s\n", cell(s.Name))
	fmt.Fprintf(tw, "timing\t%s\n", cell(timingText(s)))
	fmt.Fprintf(tw, "overlap\t%s\n", schedule.Overlap(&s.ScheduleSpec))
	fmt.Fprintf(tw, "catch-up\t%v\n", schedule.Catchup(&s.ScheduleSpec))
	fmt.Fprintf(tw, "next run\t%s\n", nextRun(s))
	if s.Queued != nil {
		fmt.Fprintf(tw, "queued tick\t%s\n", s.Queued.Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "fired\t%d\n", s.Fired)
	fmt.Fprintf(tw, "skipped\t%d %v\n", skippedTotal(s), s.Skipped)
	_ = tw.Flush()
	if len(s.Runs) > 0 {
		fmt.Fprintln(w, "\nlast runs:")
		tw = newTable(w)
		fmt.Fprintln(tw, "  TICK\tJOB\tSTATE\tNOTE")
		for _, r := range s.Runs {
			var note []string
			if r.Late {
				note = append(note, "late")
			}
			if r.Manual {
				note = append(note, "manual")
			}
			if r.Error != "" {
				note = append(note, r.Error)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Tick.Format(time.RFC3339), cell(r.JobID), r.State, cell(strings.Join(note, ", ")))
		}
		_ = tw.Flush()
	}
	if len(s.Skips) > 0 {
		fmt.Fprintln(w, "\nskipped ticks:")
		tw = newTable(w)
		fmt.Fprintln(tw, "  FIRST\tLAST\tCOUNT\tREASON")
		for _, k := range s.Skips {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s: %s\n", k.First.Format(time.RFC3339), k.Last.Format(time.RFC3339), k.Count, k.Reason, cell(k.Detail))
		}
		_ = tw.Flush()
	}
}
