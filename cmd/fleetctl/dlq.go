package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "dlq", summary: "dead letters: list, get, stats, export, replay, purge (fleetctl dlq -h)", run: dlqFamily.run})
}

// dlqFamily is "fleetctl dlq".
var dlqFamily = &family{
	name: "dlq", usage: "dlq <command> [filters] [flags]", width: 8, names: "list, get, stats, export, replay, retry, purge",
	cmds: []command{
		{name: "list", summary: "list entries (filters, --limit, --after SEQ, --json)", run: runDLQList},
		{name: "get", summary: "show one entry with its whole history: get SEQ", run: runDLQGet},
		{name: "stats", summary: "counts by job, reason, error class and signature; oldest entry; stream fill", run: runDLQStats},
		{name: "export", summary: "write entries as JSON lines (--out FILE, default stdout)", run: runDLQExport},
		{name: "replay", summary: "republish entries to their jobs (--dry-run, --rate N, --reset-attempts); Ctrl-C cancels", run: runDLQReplay},
		{name: "purge", summary: "delete entries for good (needs --yes)", run: runDLQPurge},
		{name: "retry", summary: "retry JOB: replay the job's entries, as replay --job JOB (Prodigy's dlq retry)", run: runDLQRetry},
	},
	notes: []string{
		"Filters (every command but get): --job, --reason, --error-class, --signature (or a prefix),",
		"--text (in the error, item id, payload, attempt messages), --since/--until (RFC 3339, a date, or",
		"a duration ago such as 90m or 2d), --limit. Run 'fleetctl dlq <command> -h' for its flags.",
	},
}

// filterFlags are the DLQ filters every subcommand but get takes.
type filterFlags struct {
	job, reason, class, sig, text, since, until string
	limit                                       int
}

func addFilterFlags(fs *flag.FlagSet, defaultLimit int) *filterFlags {
	f := &filterFlags{}
	fs.StringVar(&f.job, "job", "", "only entries of this job")
	fs.StringVar(&f.reason, "reason", "", "only entries dead-lettered for this reason (attempts, permanent, max_deliveries, ...)")
	fs.StringVar(&f.class, "error-class", "", "only entries whose final error is of this class (network, timeout, server_error, rate_limit, error)")
	fs.StringVar(&f.sig, "signature", "", "only entries with this error signature (or a prefix of it)")
	fs.StringVar(&f.text, "text", "", "only entries with this text (any case) in the error, item id, payload or an attempt")
	fs.StringVar(&f.since, "since", "", "only entries dead-lettered at or after this time: RFC 3339, YYYY-MM-DD, or a duration ago (90m, 2d)")
	fs.StringVar(&f.until, "until", "", "only entries dead-lettered before this time (same forms as --since)")
	fs.IntVar(&f.limit, "limit", defaultLimit, "at most this many entries (0 = all)")
	return f
}

// filter builds the request filter; a bad flag value is reported with its name.
func (f *filterFlags) filter(now time.Time) (messages.DLQFilter, error) {
	out := messages.DLQFilter{JobID: f.job, Reason: f.reason, ErrorClass: f.class, Signature: f.sig, Text: f.text, Limit: f.limit}
	var err error
	if out.Since, err = parseWhen(f.since, now); err != nil {
		return out, fmt.Errorf("--since: %w", err)
	}
	if out.Until, err = parseWhen(f.until, now); err != nil {
		return out, fmt.Errorf("--until: %w", err)
	}
	if f.limit < 0 {
		return out, fmt.Errorf("--limit: %d, want >= 0", f.limit)
	}
	if err := dlq.ValidateFilter(out); err != nil {
		var fe *dlq.FilterError
		if errors.As(err, &fe) {
			return out, fmt.Errorf("--%s: %s", flagOfField(fe.Field), fe.Message)
		}
		return out, err
	}
	return out, nil
}

func flagOfField(field string) string {
	switch field {
	case "job_id":
		return "job"
	case "error_class":
		return "error-class"
	}
	return field
}

// parseWhen reads a point in time: RFC 3339, a date, or a duration ago.
func parseWhen(s string, now time.Time) (time.Time, error) { return dlq.ParseTime(s, now) }

// dlqSetup is a dlq subcommand's opening (fleetCmd) with its filters.
// The subcommand defers close.
type dlqSetup struct {
	*fleetCmd
	filters *filterFlags
}

func newDLQFlags(env *cliEnv, name, usage string, defaultLimit int, withFilters bool) *dlqSetup {
	s := &dlqSetup{fleetCmd: newFleetCmd(env, "dlq "+name, "dlq "+usage, withJSON)}
	if withFilters {
		s.filters = addFilterFlags(s.fs, defaultLimit)
	}
	return s
}

// parse parses args; ok=false means return code.
func (s *dlqSetup) parse(env *cliEnv, args []string, positional int) (messages.DLQFilter, int, bool) {
	if code, ok := s.fleetCmd.parse(args, positional); !ok {
		return messages.DLQFilter{}, code, false
	}
	if s.filters == nil {
		return messages.DLQFilter{}, 0, true
	}
	f, err := s.filters.filter(time.Now())
	if err != nil {
		errorf(env, "%v", err)
		return f, exitUsage, false
	}
	return f, 0, true
}

func runDLQList(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "list", "list [filters] [--after SEQ] [--json]", 50, true)
	after := s.fs.Uint64("after", 0, "start after this DLQ sequence (the next page)")
	f, code, ok := s.parse(env, args, 0)
	if !ok {
		return code
	}
	f.AfterSeq = *after
	defer s.close()
	s.untimed = true // listEntries bounds each of its requests
	page, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (*messages.DLQListReply, error) {
		return listEntries(ctx, c, f, s.conn.timeout)
	})
	if code != exitOK || s.printedJSON(page) {
		return code
	}
	if len(page.Entries) == 0 {
		fmt.Fprintln(env.stdout, "no dead letters match")
		return exitOK
	}
	printDLQList(env.stdout, page, time.Now())
	return exitOK
}

// printDLQList prints one line per entry of page, their ages at now.
func printDLQList(w io.Writer, page *messages.DLQListReply, now time.Time) {
	tw := newTable(w)
	fmt.Fprintln(tw, "SEQ\tJOB\tITEM\tREASON\tCLASS\tSIGNATURE\tTRIES\tRPL\tAGE\tERROR")
	for _, r := range page.Entries {
		e := r.Entry
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Seq, cell(e.JobID), cell(cut(e.ItemID, maxItemCell)),
			cell(e.Reason), cell(e.ErrorClass), cell(e.Signature), len(e.Attempts), e.ReplayCount, age(now, e.DeadLetteredAt), oneLine(e.Error, 70))
	}
	_ = tw.Flush()
	if page.More {
		fmt.Fprintf(w, "… more entries: fleetctl dlq list --after %d (or --limit)\n", page.NextSeq)
	}
}

// listEntries returns f.Limit matching entries, or with f.Limit 0 every
// one. The coordinator bounds the entries a request examines, so a rare
// filter's page can come back short: requests go on until the page is
// full or the DLQ has no more.
func listEntries(ctx context.Context, client *client.Client, f messages.DLQFilter, timeout time.Duration) (*messages.DLQListReply, error) {
	want := f.Limit
	out := &messages.DLQListReply{Entries: []messages.DLQEntryRef{}}
	for {
		f.Limit = 1000
		if want > 0 {
			f.Limit = want - len(out.Entries)
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		page, err := client.DLQList(rctx, f)
		cancel()
		if err != nil {
			return nil, err
		}
		out.Entries = append(out.Entries, page.Entries...)
		out.More, out.NextSeq = page.More, page.NextSeq
		out.Scanned += page.Scanned
		if !page.More || (want > 0 && len(out.Entries) >= want) {
			return out, nil
		}
		f.AfterSeq = page.NextSeq
	}
}

func runDLQGet(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "get", "get SEQ [--json]", 0, false)
	if _, code, ok := s.parse(env, args, 1); !ok {
		return code
	}
	seq, err := strconv.ParseUint(s.fs.Arg(0), 10, 64)
	if err != nil || seq == 0 {
		errorf(env, "dlq get: SEQ must be a DLQ stream sequence (fleetctl dlq list shows them), not %q", s.fs.Arg(0))
		return exitUsage
	}
	defer s.close()
	ref, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (*messages.DLQEntryRef, error) {
		return c.DLQGet(ctx, seq)
	})
	if code != exitOK || s.printedJSON(ref) {
		return code
	}
	printEntry(env.stdout, ref)
	return exitOK
}

func printEntry(w io.Writer, ref *messages.DLQEntryRef) {
	e := ref.Entry
	tw := newTable(w)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, cell(v))
		}
	}
	row("seq", strconv.FormatUint(ref.Seq, 10))
	row("job", e.JobID)
	row("item", fmt.Sprintf("%s (index %d)", e.ItemID, e.Index))
	row("group", e.Group)
	row("pool", e.Pool)
	row("correlation id", e.CorrelationID)
	row("reason", e.Reason)
	row("error class", e.ErrorClass)
	row("signature", e.Signature)
	row("error", e.Error)
	row("dead-lettered", fmt.Sprintf("%s by %s", e.DeadLetteredAt.Format(time.RFC3339), orDash(e.Agent)))
	row("generation", fmt.Sprintf("%d (replayed %d times)", e.Generation, e.ReplayCount))
	if e.ItemRuns > 0 {
		row("item runs", fmt.Sprintf("%d whole-item runs (error_policy.retry_config); TRY below is run.try", e.ItemRuns))
	}
	row("work message", fmt.Sprintf("%s seq %d", e.Subject, e.StreamSeq))
	row("payload", string(e.Payload))
	_ = tw.Flush()
	fmt.Fprintf(w, "attempts (%d):\n", len(e.Attempts))
	fmt.Fprintln(tw, "  GEN\tTRY\tTIME\tSTEP\tAGENT\tCLASS\tEXIT\tMS\tMESSAGE → DECISION")
	for _, a := range e.Attempts {
		exit := "-"
		if a.ExitCode != nil {
			exit = strconv.Itoa(*a.ExitCode)
		}
		step := a.StepName
		if step == "" {
			step = fmt.Sprintf("step-%d", a.Step+1)
		}
		decision := a.Decision
		if a.DelayMS > 0 {
			decision += fmt.Sprintf(" in %s", time.Duration(a.DelayMS)*time.Millisecond)
		}
		try := strconv.Itoa(a.Attempt)
		if a.ItemRun > 0 {
			try = fmt.Sprintf("%d.%d", a.ItemRun, a.Attempt)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s → %s\n", a.Generation, try, a.Time.UTC().Format("2006-01-02 15:04:05.000Z"),
			cell(step), cell(orDash(a.Agent)), cell(orDash(a.ErrorClass)), exit, a.DurationMS, oneLine(a.Message, 80), cell(orDash(decision)))
	}
	_ = tw.Flush()
}

func runDLQStats(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "stats", "stats [filters] [--json]", 0, true)
	f, code, ok := s.parse(env, args, 0)
	if !ok {
		return code
	}
	defer s.close()
	st, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (*messages.DLQStats, error) {
		return c.DLQStats(ctx, f)
	})
	if code != exitOK || s.printedJSON(st) {
		return code
	}
	w := env.stdout
	fmt.Fprintf(w, "%d dead letters match (%s)", st.Total, bytesText(st.Bytes))
	if st.Total > 0 {
		fmt.Fprintf(w, ", the oldest %s old", (time.Duration(st.OldestAgeMS) * time.Millisecond).Round(time.Second))
	}
	fmt.Fprintln(w)
	if sst := st.Stream; sst != nil {
		fmt.Fprintf(w, "DLQ stream: %d entries, %s", sst.Messages, bytesText(sst.Bytes))
		if sst.MaxBytes > 0 {
			fmt.Fprintf(w, " of %s", bytesText(uint64(sst.MaxBytes)))
		}
		if sst.MaxMessages > 0 {
			fmt.Fprintf(w, ", at most %d entries", sst.MaxMessages)
		}
		if sst.MaxBytes > 0 || sst.MaxMessages > 0 {
			fmt.Fprintf(w, ", %.1f%% full", 100*sst.FillRatio)
		}
		if sst.MaxAgeMS > 0 {
			fmt.Fprintf(w, ", entries kept %s", messages.Duration(time.Duration(sst.MaxAgeMS)*time.Millisecond))
		}
		fmt.Fprintln(w)
		if sst.FillRatio >= dlq.DefaultWarnThreshold {
			fmt.Fprintln(w, "WARNING: past 80% of its limit; at the limit agents cannot dead-letter and keep items parked")
		}
	}
	for _, p := range st.Pools {
		if p.Problem != "" {
			fmt.Fprintf(w, "pool %s: NO DEAD-LETTER STREAM: %s\n", p.Pool, p.Problem)
			continue
		}
		fmt.Fprintf(w, "pool %s: %d entries, %s", p.Pool, p.Messages, bytesText(p.Bytes))
		if p.MaxBytes > 0 {
			fmt.Fprintf(w, " of %s", bytesText(uint64(p.MaxBytes)))
		}
		if p.MaxBytes > 0 || p.MaxMessages > 0 {
			fmt.Fprintf(w, ", %.1f%% of its quota", 100*p.FillRatio)
		}
		fmt.Fprintln(w)
	}
	printCounts(w, "by job", st.ByJob, nil)
	printCounts(w, "by reason", st.ByReason, nil)
	printCounts(w, "by error class", st.ByErrorClass, nil)
	printCounts(w, "by signature (replay or purge one with --signature)", st.BySignature, st.Examples)
	return exitOK
}

// printCounts prints a count table, largest first, at most 20 rows.
func printCounts(w io.Writer, title string, counts map[string]int64, examples map[string]string) {
	if len(counts) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	tw := newTable(w)
	for i, k := range dlq.Top(counts) {
		if i == 20 {
			fmt.Fprintf(tw, "  … %d more\n", len(counts)-i)
			break
		}
		if ex := examples[k]; ex != "" {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", counts[k], cell(k), oneLine(ex, 80))
		} else {
			fmt.Fprintf(tw, "  %d\t%s\n", counts[k], cell(orDash(k)))
		}
	}
	_ = tw.Flush()
}

func runDLQExport(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "export", "export [filters] [--out FILE]", 0, true)
	out := s.fs.String("out", "", "write to this file instead of stdout")
	f, code, ok := s.parse(env, args, 0)
	if !ok {
		return code
	}
	defer s.close()
	if !s.connect() {
		return exitFailed
	}
	w := env.stdout
	if *out != "" {
		file, err := os.Create(*out)
		if err != nil {
			errorf(env, "--out: %v", err)
			return exitUsage
		}
		defer file.Close()
		w = file
	}
	n, err := s.client.DLQExport(ctx, f, w)
	if err != nil {
		errorf(env, "export: %v (after %d entries)", err, n)
		return exitForAPIError(err)
	}
	if *out != "" {
		fmt.Fprintf(env.stderr, "exported %d entries to %s\n", n, *out)
	}
	return exitOK
}

func runDLQPurge(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "purge", "purge [filters] --yes [--json]", 0, true)
	yes := s.fs.Bool("yes", false, "really delete the matching entries")
	f, code, ok := s.parse(env, args, 0)
	if !ok {
		return code
	}
	defer s.close()
	if !*yes {
		st, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (*messages.DLQStats, error) {
			return c.DLQStats(ctx, f)
		})
		if code != exitOK {
			return code
		}
		errorf(env, "dlq purge deletes entries for good: %d match; run again with --yes to delete them", st.Total)
		return exitUsage
	}
	n, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (int64, error) {
		return c.DLQPurge(ctx, messages.DLQPurgeRequest{DLQFilter: f, Confirm: true})
	})
	if code != exitOK || s.printedJSON(messages.DLQPurgeReply{Purged: n}) {
		return code
	}
	fmt.Fprintf(env.stdout, "purged %d entries\n", n)
	return exitOK
}

// runDLQRetry is "dlq retry JOB [replay flags]", Prodigy's name of
// "dlq replay --job JOB".
func runDLQRetry(ctx context.Context, env *cliEnv, args []string) int {
	const usage = "usage: fleetctl dlq retry JOB [--dry-run] [--rate N] [--reset-attempts] [--json]: replays JOB's dead letters, as dlq replay --job JOB"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(env.stdout, usage)
		return exitOK
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(env.stderr, usage)
		return exitUsage
	}
	for _, a := range args[1:] {
		if a == "--job" || a == "-job" || strings.HasPrefix(a, "--job=") || strings.HasPrefix(a, "-job=") {
			errorf(env, "dlq retry: the job is %q; --job is not needed", args[0])
			return exitUsage
		}
	}
	return runDLQReplay(ctx, env, append([]string{"--job", args[0]}, args[1:]...))
}

func runDLQReplay(ctx context.Context, env *cliEnv, args []string) int {
	s := newDLQFlags(env, "replay", "replay [filters] [--rate N] [--dry-run] [--reset-attempts] [--json]", 0, true)
	rate := s.fs.Float64("rate", 0, "items per second (0 = as fast as possible)")
	dry := s.fs.Bool("dry-run", false, "only count what would be replayed, grouped by job, error class and signature")
	reset := s.fs.Bool("reset-attempts", false, "give replayed items all of their attempts again (default: one more try, counting on from the history)")
	f, code, ok := s.parse(env, args, 0)
	if !ok {
		return code
	}
	if *rate < 0 || *rate > dlq.MaxRate {
		errorf(env, "--rate: %v, want 0 (unpaced) to %v items/s", *rate, dlq.MaxRate)
		return exitUsage
	}
	defer s.close()
	req := messages.DLQReplayRequest{DLQFilter: f, Rate: *rate, DryRun: *dry, ResetAttempts: *reset}
	st, code := call(ctx, s.fleetCmd, func(ctx context.Context, c *client.Client) (*messages.DLQReplayStatus, error) {
		return c.DLQReplay(ctx, req)
	})
	if code != exitOK {
		return code
	}
	if *dry {
		if s.printedJSON(st) {
			return exitOK
		}
		w := env.stdout
		fmt.Fprintf(w, "dry run: %d entries would be replayed", st.Matched)
		if st.Skipped > 0 {
			fmt.Fprintf(w, " (%d more match but cannot be: poison messages)", st.Skipped)
		}
		fmt.Fprintln(w)
		printCounts(w, "by job", st.ByJob, nil)
		printCounts(w, "by error class", st.ByErrorClass, nil)
		printCounts(w, "by signature", st.BySignature, nil)
		return exitOK
	}
	st, cancelled := followReplay(ctx, env, s.client, st, s.conn.timeout, !s.asJSON())
	if !s.printedJSON(st) {
		printReplay(env.stdout, st)
	}
	if cancelled || st.State != messages.ReplayCompleted || st.Failed > 0 {
		return exitFailed
	}
	return exitOK
}

// followReplay polls a replay until it ends, drawing progress on stderr.
// When ctx ends (Ctrl-C) it cancels the replay on the coordinator and
// returns the final counts it replies with.
func followReplay(ctx context.Context, env *cliEnv, client *client.Client, st *messages.DLQReplayStatus, timeout time.Duration, draw bool) (*messages.DLQReplayStatus, bool) {
	var prog *replayProgress
	if draw {
		prog = newReplayProgress(env.stderr)
		defer prog.finish()
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for st.State == messages.ReplayRunning {
		if prog != nil {
			prog.update(st)
		}
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), timeout)
			final, err := client.DLQReplayCancel(cctx, st.ReplayID)
			cancel()
			if err != nil {
				errorf(env, "cancelling replay %s: %v (fleetctl dlq replay status: nats req fleet.api.dlq.replays '{\"replay_id\": %q}')", st.ReplayID, err, st.ReplayID)
				return st, true
			}
			return final, true
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		all, err := client.DLQReplays(pctx, st.ReplayID)
		cancel()
		switch {
		case err == nil && len(all) == 1:
			st = &all[0]
		case ctx.Err() != nil:
		default:
			errorf(env, "replay status: %v (still trying)", err)
		}
	}
	if prog != nil {
		prog.update(st)
	}
	return st, false
}

func printReplay(w io.Writer, st *messages.DLQReplayStatus) {
	fmt.Fprintf(w, "replay %s %s: %d of %d entries replayed", st.ReplayID, st.State, st.Replayed, st.Matched)
	if st.Failed > 0 {
		fmt.Fprintf(w, ", %d failed (still in the DLQ)", st.Failed)
	}
	if st.Skipped > 0 {
		fmt.Fprintf(w, ", %d skipped", st.Skipped)
	}
	fmt.Fprintln(w)
	if st.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", st.LastError)
	}
	if st.State == messages.ReplayCancelled {
		fmt.Fprintln(w, "  run the same command again to replay the rest: entries already replayed are not replayed twice")
	}
	if st.Replayed > 0 && st.Filter.JobID != "" {
		fmt.Fprintf(w, "  follow the job: fleetctl watch %s\n", st.Filter.JobID)
	}
}

// maxItemCell bounds an item id in a table: ids are user data of any
// length (fleetctl dlq get shows one whole).
const maxItemCell = 40

// cut shortens s to at most n characters, the last an ellipsis, cutting on
// a rune boundary.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func bytesText(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
