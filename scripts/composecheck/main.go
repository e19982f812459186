// Command composecheck is scripts/compose-e2e.sh's helper inside the compose
// network: it finds the JetStream meta leader, follows a job, and audits the
// end state independently of the coordinator's counts.
//
//	composecheck leader http://nats-1:8222 http://nats-2:8222 ...
//	composecheck converged [--timeout 1m] URL...      # every node holds the same copy of every stream
//	composecheck wait JOB [--done N] [--timeout 5m]   # until N items are done, or the job ends
//	composecheck wait JOB --more N                    # until N more items are done than now
//	composecheck verify JOB --items N --status FILE   # the status fleetctl printed vs the streams
//	composecheck unreachable URL...                   # nothing answers at any of these host:ports
//	composecheck healthy [--timeout 2m] URL           # until the node's /healthz says ok (JetStream current)
//	composecheck holder [--wait-not NAME] [--timeout 1m]  # the coordinator holding the lease
//	composecheck probe JOB --for 40s [--every 500ms] [--timeout 3s] [--max-gap 25s] [--max-failures N]
//	                                                  # status probes during a fault: failures, counts going back, resume time
//	composecheck fill [--mib N] [--until-full]        # store 1 MiB chunks in the uploads object store (the disk faults)
//	composecheck free                                 # purge what fill stored (the coordinator's role)
//	composecheck group STREAM URL...                  # each node's view of a stream's leader and replicas
//
// Connection flags and environment are the binaries' (--server/NATS_URL,
// --nkey/NATS_NKEY, --tls-ca/NATS_TLS_CA). wait needs a role that reads
// status (operator, submitter); verify reads the results, DLQ and work
// streams, which only the coordinator's role may read: run it with the
// coordinator's nkey, and give it the status `fleetctl status --json`
// printed. holder reads the control bucket: the coordinator's role too.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	jfclient "github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: composecheck leader|wait|verify ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "leader":
		err = leader(ctx, os.Args[2:])
	case "converged":
		err = converged(ctx, os.Args[2:])
	case "wait":
		err = wait(ctx, os.Args[2:])
	case "probe":
		err = probe(ctx, os.Args[2:])
	case "verify":
		err = verify(ctx, os.Args[2:])
	case "unreachable":
		err = unreachable(ctx, os.Args[2:])
	case "holder":
		err = holder(ctx, os.Args[2:])
	case "fill":
		err = fill(ctx, os.Args[2:])
	case "free":
		err = free(ctx, os.Args[2:])
	case "healthy":
		err = healthy(ctx, os.Args[2:])
	case "group":
		err = group(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "composecheck:", err)
		os.Exit(1)
	}
}

// holder prints the name (Config.Holder) of the coordinator that holds
// the leader's lease, waiting until one whose name does not start with
// --wait-not does.
func holder(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("holder", flag.ContinueOnError)
	not := fs.String("wait-not", "", "wait for a holder whose name does not start with this")
	timeout := fs.Duration("timeout", time.Minute, "give up after")
	nc, _, err := connect(fs, args)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	names := messages.MustNames(os.Getenv("FLEET_PREFIX"))
	for {
		var last error
		if kv, err := js.KeyValue(ctx, names.ControlBucket()); err != nil {
			last = err
		} else if e, err := kv.Get(ctx, wire.LeaseKey); err != nil {
			last = err
		} else {
			var v struct {
				Holder string `json:"holder"`
			}
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return err
			}
			if *not == "" || !strings.HasPrefix(v.Holder, *not) {
				fmt.Println(v.Holder)
				return nil
			}
			last = fmt.Errorf("still held by %s", v.Holder)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no other holder within %s: %w", *timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unreachable fails if a TCP connection to any URL's host:port succeeds:
// run where job code runs, it shows that the NATS monitoring and cluster
// ports are out of its reach.
func unreachable(ctx context.Context, urls []string) error {
	if len(urls) == 0 {
		return errors.New("unreachable: no URL given")
	}
	var reached []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("unreachable: %q is not a URL with a host:port", raw)
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", u.Host)
		cancel()
		if err == nil {
			_ = conn.Close()
			reached = append(reached, raw)
			continue
		}
		fmt.Printf("%s: unreachable (%v)\n", raw, err)
	}
	if len(reached) > 0 {
		return fmt.Errorf("reachable from here: %s", strings.Join(reached, ", "))
	}
	return nil
}

// healthy waits until a node's monitoring endpoint answers /healthz with
// 200: the server accepts clients and every stream and consumer it holds
// a replica of is current (a restarted node has caught up). It prints how
// long that took.
func healthy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("healthy", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("healthy: give one node's monitoring URL")
	}
	u := strings.TrimRight(fs.Arg(0), "/") + "/healthz"
	client := &http.Client{Timeout: 3 * time.Second}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Printf("%s: healthy after %s\n", fs.Arg(0), time.Since(start).Round(100*time.Millisecond))
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy within %s: %s", u, *timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// leader prints the JetStream meta leader's server name, as the nodes'
// monitoring endpoints (/jsz) report it.
func leader(ctx context.Context, urls []string) error {
	client := &http.Client{Timeout: 3 * time.Second}
	votes := map[string]int{}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(u, "/")+"/jsz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			continue // a node may be down
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err == nil && jsz.Meta != nil && jsz.Meta.Leader != "" {
			votes[jsz.Meta.Leader]++
		}
	}
	best, n := "", 0
	for l, v := range votes {
		if v > n {
			best, n = l, v
		}
	}
	if best == "" {
		return errors.New("no node reports a meta leader")
	}
	fmt.Println(best)
	return nil
}

// replica is one node's copy of a stream.
type replica struct {
	Msgs    uint64 `json:"messages"`
	LastSeq uint64 `json:"last_seq"`
}

// streamsOf returns the state of every stream replica node u holds.
func streamsOf(ctx context.Context, client *http.Client, u string) (map[string]replica, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(u, "/")+"/jsz?accounts=true&streams=true", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Name    string `json:"name"`
			Streams []struct {
				Name  string  `json:"name"`
				State replica `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return nil, err
	}
	out := map[string]replica{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			out[a.Name+"/"+s.Name] = s.State
		}
	}
	return out, nil
}

// converged waits until every node holds every stream with the same
// messages and last sequence: a restarted node has caught up.
func converged(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("converged", flag.ContinueOnError)
	timeout := fs.Duration("timeout", time.Minute, "give up after")
	if err := fs.Parse(args); err != nil {
		return err
	}
	urls := fs.Args()
	if len(urls) < 2 {
		return errors.New("converged: give every node's monitoring URL")
	}
	client := &http.Client{Timeout: 3 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for {
		var diff string
		var first map[string]replica
		for i, u := range urls {
			got, err := streamsOf(ctx, client, u)
			if err != nil {
				diff = fmt.Sprintf("%s: %v", u, err)
				break
			}
			if i == 0 {
				first = got
				continue
			}
			for name, r := range first {
				if o, ok := got[name]; !ok {
					diff = fmt.Sprintf("%s holds no copy of %s", u, name)
				} else if o != r {
					diff = fmt.Sprintf("%s: %s at %d messages, last seq %d; %s at %d, %d", name, urls[0], r.Msgs, r.LastSeq, u, o.Msgs, o.LastSeq)
				}
			}
			if len(got) != len(first) {
				diff = fmt.Sprintf("%s holds %d streams, %s %d", u, len(got), urls[0], len(first))
			}
			if diff != "" {
				break
			}
		}
		if diff == "" && len(first) > 0 {
			names := make([]string, 0, len(first))
			for n, r := range first {
				names = append(names, fmt.Sprintf("%s=%d", n[strings.Index(n, "/")+1:], r.Msgs))
			}
			slices.Sort(names)
			fmt.Printf("%d nodes hold identical copies of %d streams: %s\n", len(urls), len(first), strings.Join(names, " "))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicas differ after %s: %s", *timeout, diff)
		case <-time.After(time.Second):
		}
	}
}

func connect(fs *flag.FlagSet, args []string) (*nats.Conn, *flag.FlagSet, error) {
	var o natsconn.Options
	o.Register(fs, os.Getenv)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if err := o.ApplyContext(os.Getenv, false); err != nil {
		return nil, nil, err
	}
	o.Name = "composecheck"
	o.OnAsyncError = func(err error) { fmt.Fprintln(os.Stderr, "composecheck: nats:", err) }
	nc, err := o.Connect("")
	return nc, fs, err
}

// flagsAfter lets JOB come first: "wait JOB --done 10".
func flagsAfter(args []string) (string, []string, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", nil, errors.New("JOB is required first")
	}
	return args[0], args[1:], nil
}

func wait(ctx context.Context, args []string) error {
	job, rest, err := flagsAfter(args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	done := fs.Int64("done", 0, "return once this many items are done (0: when the job ends)")
	more := fs.Int64("more", 0, "return once this many more items are done than at the first answer")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after")
	nc, _, err := connect(fs, rest)
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := jfclient.New(nc, os.Getenv("FLEET_PREFIX"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var last time.Time
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := client.JobStatus(rctx, job)
		rcancel()
		switch {
		case err == nil:
			if *more > 0 {
				*done, *more = st.Done()+*more, 0
			}
			if time.Since(last) > 5*time.Second || messages.TerminalState(st.State) || (*done > 0 && st.Done() >= *done) {
				fmt.Fprintf(os.Stderr, "  %s %s: %d/%d done (succeeded %d, dead-lettered %d, retries %d)\n",
					time.Now().Format("15:04:05"), st.State, st.Done(), st.Items, st.Succeeded, st.DeadLettered, st.Retries)
				last = time.Now()
			}
			if messages.TerminalState(st.State) {
				if *done > 0 && st.Done() < *done {
					return fmt.Errorf("job %s ended (%s) before %d items were done", job, st.State, *done)
				}
				return nil
			}
			if *done > 0 && st.Done() >= *done {
				return nil
			}
		case ctx.Err() != nil:
			return fmt.Errorf("job %s: %w", job, ctx.Err())
		default:
			// Not taken in yet, or a coordinator or server restart: keep polling.
			if time.Since(last) > 5*time.Second {
				fmt.Fprintf(os.Stderr, "  %s status: %v (retrying)\n", time.Now().Format("15:04:05"), err)
				last = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s: %w", job, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// record is what verify reads of results and dead letters.
type record struct {
	JobID      string `json:"job_id"`
	ItemID     string `json:"item_id"`
	Outcome    string `json:"outcome"`
	Generation int    `json:"generation"`
	// origin is the pool whose agent published the record: the token
	// after "results." or "dlq." in its subject.
	origin string
}

// decodeRecords decodes a message of the results or DLQ stream: one
// record, or a batch of results (a JSON array, docs/contract.md).
func decodeRecords(data []byte) ([]record, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		var rs []record
		return rs, json.Unmarshal(t, &rs)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return []record{r}, nil
}

// readAll decodes every message of stream on subject.
func readAll(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]record, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, err
	}
	var want uint64 // subject may be a wildcard: count every subject it matches
	for _, n := range info.State.Subjects {
		want += n
	}
	if want == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	var out []record
	var read uint64 // messages; a results message may hold a batch of records
	for read < want {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			rs, err := decodeRecords(m.Data())
			if err != nil {
				return nil, fmt.Errorf("%s seq %d: %w", stream, mustSeq(m), err)
			}
			if tokens := strings.Split(m.Subject(), "."); len(tokens) == 4 {
				for i := range rs {
					rs[i].origin = tokens[2] // <prefix>.results.<origin>.<job>
				}
			}
			out = append(out, rs...)
			read++
			n++
		}
		if batch.Error() != nil && !errors.Is(batch.Error(), jetstream.ErrNoMessages) {
			return nil, batch.Error()
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: read %d of %d messages on %s", stream, read, want, subject)
		}
	}
	return out, nil
}

// retryRead retries read while the cluster settles: right after a node
// restarts, a JetStream request through it may find no responder or time
// out.
func retryRead(ctx context.Context, what string, read func() ([]record, error)) ([]record, error) {
	backoff := retry.NewBackoff(retry.Exponential(500*time.Millisecond, 5*time.Second), nil, nil)
	for {
		r, err := read()
		if err == nil {
			return r, nil
		}
		fmt.Fprintf(os.Stderr, "  %s: %v (retrying)\n", what, err)
		if werr := backoff.Wait(ctx); werr != nil {
			return nil, fmt.Errorf("%s: %w (last error: %v)", what, werr, err)
		}
	}
}

func mustSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// verify checks the end state of a job against the streams:
//   - the status: terminal, succeeded + dead_lettered == items, nothing else;
//   - the results stream: every item has a final outcome (its latest
//     generation's), succeeded or dead_lettered, and those sets match the
//     status counts — none lost, none counted twice;
//   - the DLQ stream: exactly one entry per dead-lettered item;
//   - the work stream: nothing of the job left.
func verify(ctx context.Context, args []string) error {
	job, rest, err := flagsAfter(args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	items := fs.Int64("items", 0, "the job's item count")
	statusFile := fs.String("status", "", "the job's status as `fleetctl status --json` printed it")
	origin := fs.String("origin", "", "the pool whose agents must have published every result (the job ran there only)")
	nc, _, err := connect(fs, rest)
	if err != nil {
		return err
	}
	defer nc.Close()
	names, err := messages.NewNames(os.Getenv("FLEET_PREFIX"))
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*statusFile)
	if err != nil {
		return fmt.Errorf("--status: %w", err)
	}
	var st messages.JobStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("--status %s: %w", *statusFile, err)
	}
	if st.ID != job {
		return fmt.Errorf("--status is job %q's, not %q's", st.ID, job)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var problems []string
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	if !messages.TerminalState(st.State) {
		fail("state %s is not terminal", st.State)
	}
	if st.Items != *items {
		fail("items %d, want %d", st.Items, *items)
	}
	if st.Succeeded+st.DeadLettered != st.Items {
		fail("succeeded %d + dead_lettered %d != items %d", st.Succeeded, st.DeadLettered, st.Items)
	}
	if st.Failed != 0 || st.Skipped != 0 || st.NotRun != 0 {
		fail("failed %d, skipped %d, not_run %d: want 0", st.Failed, st.Skipped, st.NotRun)
	}

	results, err := retryRead(ctx, "results", func() ([]record, error) {
		return readAll(ctx, js, names.ResultsStream(), names.JobResultsFilter(job))
	})
	if err != nil {
		return err
	}
	final := map[string]record{} // item -> result of its latest generation
	for _, r := range results {
		if cur, ok := final[r.ItemID]; !ok || r.Generation >= cur.Generation {
			final[r.ItemID] = r
		}
	}
	if *origin != "" {
		others := map[string]int{}
		for _, r := range results {
			if r.origin != *origin {
				others[r.origin]++
			}
		}
		if len(others) > 0 {
			fail("results from agents of other pools than %s: %v", *origin, others)
		}
	}
	byOutcome := map[string]int64{}
	for _, r := range final {
		byOutcome[r.Outcome]++
	}
	if int64(len(final)) != *items {
		fail("results name %d distinct items, want %d", len(final), *items)
	}
	if byOutcome[messages.OutcomeSucceeded] != st.Succeeded {
		fail("results: %d items succeeded, the status says %d", byOutcome[messages.OutcomeSucceeded], st.Succeeded)
	}
	if byOutcome[messages.OutcomeDeadLettered] != st.DeadLettered {
		fail("results: %d items dead-lettered, the status says %d", byOutcome[messages.OutcomeDeadLettered], st.DeadLettered)
	}

	dead, err := retryRead(ctx, "dlq", func() ([]record, error) {
		return readAll(ctx, js, names.DLQStream(), names.JobDLQFilter(job))
	})
	if err != nil {
		return err
	}
	perItem := map[string]int{}
	for _, d := range dead {
		perItem[d.ItemID]++
	}
	var dupes []string
	for id, n := range perItem {
		if n > 1 {
			dupes = append(dupes, fmt.Sprintf("%s x%d", id, n))
		}
		if final[id].Outcome != messages.OutcomeDeadLettered {
			fail("DLQ holds item %s whose final outcome is %q", id, final[id].Outcome)
		}
	}
	slices.Sort(dupes)
	if len(dupes) > 0 {
		fail("DLQ entries repeated: %v", dupes)
	}
	if int64(len(dead)) != st.DeadLettered {
		fail("DLQ holds %d entries for the job, the status says %d dead-lettered", len(dead), st.DeadLettered)
	}

	var left uint64
	_, err = retryRead(ctx, "work", func() ([]record, error) {
		work, err := js.Stream(ctx, names.WorkStream())
		if err != nil {
			return nil, err
		}
		info, err := work.Info(ctx, jetstream.WithSubjectFilter(names.WorkSubject(st.Pool, job)))
		if err != nil {
			return nil, err
		}
		left = info.State.Subjects[names.WorkSubject(st.Pool, job)]
		return nil, nil
	})
	if err != nil {
		return err
	}
	if left != 0 {
		fail("the work stream still holds %d messages of the job", left)
	}

	fmt.Printf("verify %s: %d items, %d succeeded, %d dead-lettered (%d DLQ entries, %d distinct), %d results read for %d items, %d retries\n",
		job, st.Items, st.Succeeded, st.DeadLettered, len(dead), len(perItem), len(results), len(final), st.Retries)
	if len(problems) > 0 {
		return fmt.Errorf("%d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Println("verify: OK — every item succeeded or was dead-lettered exactly once; none lost, none counted twice")
	return nil
}

// probe asks for the job's status every --every for --for, each request
// given --timeout (a fresh attempt each time, as `fleetctl status` is),
// and reports: how many probes failed or took longer than --timeout, the
// longest stretch with no answer, whether the done count ever went back
// (and how many answers had an as_of older than one seen), how long after
// the start the count first moved past where it was (the job resumed), and
// the machine's load average. It fails when the count went back, and when
// status went unanswered for longer than --max-gap: what a fault may not
// do, whatever the machine's speed. How many 3 s probes fail while a
// coordinator takes over depends on that speed (at a load average of 30 a
// takeover took 18 s, at 1–3 about 5 s): --max-failures bounds it only
// when given (>= 0). Its
// client moves to another server when the one it is on finds no
// coordinator (client.WithFailover), as fleetctl's does. Each failed
// probe is logged to stderr with the server it was on. With
// --not-while-down, a probe that failed and was made or ended while the
// connection had no server (every node down, or not yet accepting
// clients) is reported apart and not counted.
func probe(ctx context.Context, args []string) error {
	job, rest, err := flagsAfter(args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	window := fs.Duration("for", 40*time.Second, "probe for this long")
	every := fs.Duration("every", 500*time.Millisecond, "one probe every")
	timeout := fs.Duration("timeout", 3*time.Second, "a probe not answered within this failed")
	maxFailures := fs.Int("max-failures", -1, "fail when more probes than this failed (-1: no bound, the failures are only reported)")
	maxGap := fs.Duration("max-gap", 0, "fail when no probe was answered for longer than this (0: no bound)")
	label := fs.String("label", "", "name of the fault, for the report")
	whileDown := fs.Bool("not-while-down", false, "do not count probes that failed with no server to connect to (every node down)")
	nc, _, err := connect(fs, rest)
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := jfclient.New(nc, os.Getenv("FLEET_PREFIX"), jfclient.WithFailover())
	if err != nil {
		return err
	}
	start := time.Now()
	var probes, failures, backwards, stale, down int
	var newest *time.Time // the latest as_of seen
	var slowest time.Duration
	var maxDone, firstDone int64 = -1, -1
	resumed := time.Duration(-1)
	var lastErr error
	ended := false
	lastAnswer := start // the start, or the last probe answered
	var gap time.Duration
	load0 := loadAverage()
	for time.Since(start) < *window && ctx.Err() == nil && !ended {
		// Where the client is, read before the request: both calls wait
		// for the connection's lock, which nats.go holds while it dials a
		// server to reconnect to (seconds, after every node was killed).
		// The probe times the status request from when it is made.
		server := nc.ConnectedServerName()
		upAtStart := nc.IsConnected()
		t0 := time.Now()
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		st, err := client.JobStatus(rctx, job)
		cancel()
		d := time.Since(t0)
		probes++
		slowest = max(slowest, d)
		switch {
		case (err != nil || d > *timeout) && *whileDown && (!upAtStart || !nc.IsConnected()):
			down++
			fmt.Fprintf(os.Stderr, "  %s probe failed at +%s with no server up (not counted): %v\n", t0.Format("15:04:05.0"), t0.Sub(start).Round(100*time.Millisecond), err)
		case err != nil || d > *timeout:
			failures++
			lastErr = err
			// Which server the probe was on, and what it got: a timeout
			// (no coordinator answered through it) or an error.
			fmt.Fprintf(os.Stderr, "  %s probe failed at +%s after %s on %s (now on %s): %v\n", t0.Format("15:04:05.0"),
				t0.Sub(start).Round(100*time.Millisecond), d.Round(10*time.Millisecond), server, nc.ConnectedServerName(), err)
		default:
			gap = max(gap, time.Since(lastAnswer))
			lastAnswer = time.Now()
			done := st.Done()
			if firstDone < 0 {
				firstDone = done
			}
			// Only the leader answers status, from state at least as new
			// as any answer given (docs/design.md, "Status never goes
			// back"): an older answer is a fault, whatever its as_of says.
			if st.AsOf != nil && newest != nil && st.AsOf.Before(*newest) {
				stale++
			}
			if done < maxDone {
				backwards++
				fmt.Fprintf(os.Stderr, "  %s probe: done went back from %d to %d (source %s, as_of %v)\n", time.Now().Format("15:04:05"), maxDone, done, st.Source, st.AsOf)
			}
			if st.AsOf != nil && (newest == nil || st.AsOf.After(*newest)) {
				newest = st.AsOf
			}
			maxDone = max(maxDone, done)
			if resumed < 0 && done > firstDone {
				resumed = time.Since(start)
			}
			ended = messages.TerminalState(st.State)
		}
		if rest := *every - time.Since(t0); rest > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(rest):
			}
		}
	}
	if !ended {
		gap = max(gap, time.Since(lastAnswer)) // unanswered to the end
	}
	res := "never"
	if resumed >= 0 {
		res = resumed.Round(100 * time.Millisecond).String()
	}
	downs := ""
	if *whileDown {
		downs = fmt.Sprintf(" (+%d while no server was up)", down)
	}
	fmt.Printf("%s: %d probes, %d failed (>%s or error)%s, slowest %s, longest unanswered %s, done %d..%d, went back %d times (%d older answers, by as_of), progress resumed after %s; load average %s then %s\n",
		*label, probes, failures, *timeout, downs, slowest.Round(10*time.Millisecond), gap.Round(100*time.Millisecond),
		firstDone, maxDone, backwards, stale, res, load0, loadAverage())
	if *maxFailures >= 0 && failures > *maxFailures {
		return fmt.Errorf("%s: %d status probes failed (at most %d allowed); last error: %v", *label, failures, *maxFailures, lastErr)
	}
	if *maxGap > 0 && gap > *maxGap {
		return fmt.Errorf("%s: status went unanswered for %s (at most %s allowed); last error: %v", *label, gap.Round(100*time.Millisecond), *maxGap, lastErr)
	}
	if backwards > 0 {
		return fmt.Errorf("%s: the done count went back %d times", *label, backwards)
	}
	return nil
}

// fillSubject is where fill stores its chunks: a chunk subject of the
// uploads object store, which a submitter may publish to (internal/auth),
// under a name no upload uses, so that free purges only what fill stored.
func fillSubject() string {
	return "$O." + messages.MustNames(os.Getenv("FLEET_PREFIX")).UploadsBucket() + ".C.composecheck-fill"
}

// fill stores 1 MiB chunks in the uploads object store (R3, as every
// stream, so each node stores them) until --mib are stored or, with
// --until-full, until JetStream has refused every chunk for want of room
// (store full: insufficient resources; then, with every node full, no
// stream leader: unanswered) for --full-for. A chunk refused
// otherwise (a stream leader stepping down on a node that is full, an
// election) is tried again. It prints what it stored.
func fill(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fill", flag.ContinueOnError)
	mib := fs.Int("mib", 0, "stop once this many MiB are stored (0: no bound)")
	untilFull := fs.Bool("until-full", false, "stop once every chunk is refused for want of room for --full-for")
	fullFor := fs.Duration("full-for", 5*time.Second, "with --until-full: how long refusals must last")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after")
	nc, _, err := connect(fs, args)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *mib <= 0 && !*untilFull {
		return errors.New("fill: --mib or --until-full")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	blob := make([]byte, 1<<20)
	start := time.Now()
	var stored, refused int
	var fullSince time.Time
	var last error
	for *mib <= 0 || stored < *mib {
		if ctx.Err() != nil {
			return fmt.Errorf("fill: %d MiB stored in %s, then: %w (last error: %v)", stored, *timeout, ctx.Err(), last)
		}
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.Publish(pctx, fillSubject(), blob)
		pcancel()
		switch {
		case err == nil:
			stored++
			fullSince = time.Time{}
			continue
		case natsconn.StoreFull(err):
			refused++
			if fullSince.IsZero() {
				fullSince = time.Now()
			}
			if *untilFull && time.Since(fullSince) >= *fullFor {
				fmt.Printf("store full: %d MiB stored in %s, then every chunk refused for %s (%d refused): %v\n",
					stored, time.Since(start).Round(100*time.Millisecond), *fullFor, refused, err)
				return nil
			}
		case natsconn.ClusterLoss(err):
			// A stream leader whose node is full steps down, and a full
			// node does not stand for election: once every node is full
			// the stream has no leader, and chunks go unanswered. (When
			// only the followers are full, they drop what the leader
			// sends: unanswered from the first.)
			if fullSince.IsZero() {
				fullSince = time.Now()
			}
			refused++
			if *untilFull && time.Since(fullSince) >= *fullFor {
				fmt.Printf("store full: %d MiB stored in %s, then every chunk refused or unanswered for %s (%d): %v\n",
					stored, time.Since(start).Round(100*time.Millisecond), *fullFor, refused, err)
				return nil
			}
		default:
			fullSince = time.Time{}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	fmt.Printf("%d MiB stored in %s (%d chunks refused for want of room on the way)\n", stored, time.Since(start).Round(100*time.Millisecond), refused)
	return nil
}

// free purges what fill stored (the coordinator's role may purge the
// uploads object store's stream), trying again until --timeout.
func free(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("free", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after")
	nc, _, err := connect(fs, args)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	stream := "OBJ_" + messages.MustNames(os.Getenv("FLEET_PREFIX")).UploadsBucket()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		// Each attempt on its own deadline: a purge is answered by the
		// stream's leader once applied, and a request made while the
		// stream has no leader (or to a leader that loses its term before
		// the purge commits) is never answered.
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(actx, stream)
		if err == nil {
			err = s.Purge(actx, jetstream.WithPurgeSubject(fillSubject()))
		}
		acancel()
		if err == nil {
			fmt.Printf("purged what fill stored (attempt %d, %s)\n", attempt, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		fmt.Fprintf(os.Stderr, "free: +%s attempt %d: %v\n", time.Since(start).Round(100*time.Millisecond), attempt, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("free: %d attempts in %s: %w", attempt, *timeout, err)
		case <-time.After(time.Second):
		}
	}
}

// group prints how each node (its monitoring URL) sees one stream's raft
// group: its leader, and each replica's current, lag and last contact,
// so that a stream without a leader can be told apart from one led from a
// node that applies nothing.
func group(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return errors.New("group: STREAM URL...")
	}
	name := args[0]
	client := &http.Client{Timeout: 3 * time.Second}
	for _, u := range args[1:] {
		line, err := groupOf(ctx, client, u, name)
		if err != nil {
			line = err.Error()
		}
		fmt.Printf("%s: %s\n", u, line)
	}
	return nil
}

// groupOf is one node's view of stream name's group (see group).
func groupOf(ctx context.Context, client *http.Client, u, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(u, "/")+"/jsz?accounts=true&streams=true", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var jsz struct {
		Name     string `json:"server_name"`
		Accounts []struct {
			Streams []struct {
				Name    string  `json:"name"`
				State   replica `json:"state"`
				Cluster *struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Name    string `json:"name"`
						Current bool   `json:"current"`
						Offline bool   `json:"offline"`
						Active  int64  `json:"active"`
						Lag     uint64 `json:"lag"`
					} `json:"replicas"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", err
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name != name {
				continue
			}
			line := fmt.Sprintf("%s holds %d messages (last seq %d)", jsz.Name, s.State.Msgs, s.State.LastSeq)
			if s.Cluster == nil {
				return line + ", no cluster info", nil
			}
			line += fmt.Sprintf(", leader %q", s.Cluster.Leader)
			for _, r := range s.Cluster.Replicas {
				line += fmt.Sprintf("; %s current=%t offline=%t lag=%d active=%s", r.Name, r.Current, r.Offline, r.Lag,
					time.Duration(r.Active).Round(time.Millisecond))
			}
			return line, nil
		}
	}
	return jsz.Name + " holds no copy", nil
}

// loadAverage is the machine's 1-minute load average (Linux), or "?".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
