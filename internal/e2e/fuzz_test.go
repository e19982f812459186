package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Submission modes of FuzzSubmit.
const (
	viaAPI = iota
	viaIntake
	viaBoth
)

// FuzzSubmit feeds random specs and items through the API (a jobs.submit
// request) and the durable intake (a publish to fleet.jobs.submit) of a
// coordinator and an agent on an embedded server, and checks after each
// that no process died or lost its connection and that the coordinator
// still answers jobs.status; every 25 inputs, and at the end, an ordinary
// job must succeed (the agent still runs items).
//
//	go test -run '^$' -fuzz FuzzSubmit -fuzztime 60s -fuzzminimizetime 20x -parallel 1 ./internal/e2e/
//
// (Minimizing an interesting input runs the target many times without
// counting them as execs: -fuzzminimizetime 20x keeps the count honest.)
// testdata/fuzz/FuzzSubmit keeps the inputs that crashed the coordinator.
//
// Specs that parse have their shell commands replaced by `true` or
// `exit 3` and their delays shortened (sanitize): the fuzzer must not run
// what it invents, nor park items for minutes.
func FuzzSubmit(f *testing.F) {
	for _, s := range fuzzSeeds() {
		for mode := range uint8(3) {
			f.Add([]byte(s), mode)
		}
	}
	// Inputs the seeds name: files in the coordinator's input directory
	// (an upload is read once, by the job that adopts it).
	dir := f.TempDir()
	for name, data := range map[string]string{
		"deep.json":  strings.Repeat("[", 60) + strings.Repeat("]", 60),
		"items.json": `{"items": [{"id": "a", "r": "eu"}, {"id": "b", "r": "us"}, {"id": "a"}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	srv := fleettest.RunServer(f)
	coord := startCoordinator(f, srv.URL(), coordinator.Config{
		MaxSpecBytes: 256 << 10, MaxItems: 1000, MaxPathNodes: 200_000, IntakeMaxDeliveries: 2, InputDir: dir,
	})
	ag := startAgent(f, srv.URL(), agent.Config{Name: "fuzz-agent", Concurrency: 16}, nil)
	cl := client(f, srv)
	ordinaryJob(f, cl, "fuzz-sentinel")
	names := messages.MustNames("")
	runs := 0
	f.Cleanup(func() {
		if !f.Failed() {
			ordinaryJob(f, cl, "fuzz-final")
		}
	})

	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		runs++
		data, id := sanitize(data)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var ids []string
		if mode%3 != viaIntake {
			reply, err := cl.JobSubmit(ctx, data)
			var ae *messages.APIError
			switch {
			case err == nil:
				ids = append(ids, reply.JobID)
			case errors.As(err, &ae), errors.Is(err, nats.ErrMaxPayload):
				// Refused: what bad input should get.
			default:
				t.Fatalf("jobs.submit of %d bytes: %v", len(data), err)
			}
		}
		if mode%3 != viaAPI {
			ack, err := srv.JS().Publish(ctx, names.JobsSubmitSubject(), data)
			switch {
			case err == nil && id != "":
				ids = append(ids, id)
			case err == nil:
				ids = append(ids, "job-"+strconv.FormatUint(ack.Sequence, 10))
			case !errors.Is(err, nats.ErrMaxPayload):
				t.Fatalf("publishing to the intake: %v", err)
			}
		}
		if _, err := cl.JobStatus(ctx, "fuzz-sentinel"); err != nil {
			t.Fatalf("the coordinator stopped answering jobs.status: %v", err)
		}
		requireAlive(t, "coordinator", coord)
		requireAlive(t, "agent", ag)
		// Don't let fuzzed jobs pile up in the fleet (best effort: a durable
		// submission may not be accepted yet).
		for _, id := range ids {
			_, _ = cl.JobCancel(ctx, id)
		}
		if runs%25 == 0 {
			ordinaryJob(t, cl, fmt.Sprintf("fuzz-ordinary-%d", runs))
		}
	})
}

// sanitize replaces, in a spec that parses, every shell command by `true`
// (or `exit 3` when it mentions exit), the sleep handler by noop, and
// every delay by a few milliseconds, and returns the spec re-encoded with
// its id. Anything else is returned as is: the coordinator refuses it.
func sanitize(data []byte) ([]byte, string) {
	spec, err := jobspec.Parse(data)
	if err != nil {
		return data, ""
	}
	steps := func(ss []messages.Step) {
		for i := range ss {
			sanitizeStep(&ss[i])
		}
	}
	steps(spec.AgentTemplate)
	steps(spec.Reduce)
	if ep := spec.ErrorPolicy; ep != nil {
		if a := ep.OnItemFailure; a != nil && a.Custom != nil {
			sanitizeStep(a.Custom)
		}
		if cb := ep.CircuitBreaker; cb != nil && cb.Timeout > 0 {
			cb.Timeout = messages.Duration(50 * time.Millisecond)
		}
		if rc := ep.RetryConfig; rc != nil {
			rc.InitialDelay, rc.MaxDelay, rc.Backoff = ms(1), ms(10), nil
		}
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return data, ""
	}
	return out, spec.ID
}

func sanitizeStep(st *messages.Step) {
	switch {
	case strings.Contains(st.Shell, "exit"):
		st.Shell = "exit 3"
	case st.Shell != "":
		st.Shell = "true"
	}
	if st.Handler == "sleep" {
		st.Handler = "noop"
	}
	if rc := st.RetryConfig; rc != nil {
		rc.InitialDelay, rc.MaxDelay, rc.RetryBudget, rc.Backoff = ms(1), ms(10), nil, nil
		if f := rc.OnFailure; f != nil && f.Fallback != "" {
			f.Fallback = "true"
		}
	}
}

func ms(n int) *messages.Duration {
	d := messages.Duration(time.Duration(n) * time.Millisecond)
	return &d
}

// fuzzSeeds are the inputs that once crashed, hung or looped the fleet
// (docs/security.md "Limits"), and a few ordinary ones to mutate.
func fuzzSeeds() []string {
	long := strings.Repeat("x", 5000)
	return []string{
		// Case 1: a 5,000-character item id, failing and succeeding.
		fmt.Sprintf(`{"id": "long-id", "items": [{"id": %q}], "agent_template": [{"shell": "exit 3", "retry_config": {"attempts": 2}}]}`, long),
		fmt.Sprintf(`{"items": [{"id": %q}, {"id": "short"}], "agent_template": [{"handler": "noop"}]}`, long),
		// A job id that is not one.
		fmt.Sprintf(`{"id": %q, "items": [1], "agent_template": [{"handler": "noop"}]}`, long),
		// Case 2: an item near, and over, what a work message may be.
		fmt.Sprintf(`{"items": [{"id": "big", "blob": %q}], "agent_template": [{"handler": "noop"}]}`, strings.Repeat("b", 250<<10)),
		// Case 3: a spec over --max-spec-bytes (256 KiB here).
		fmt.Sprintf(`{"id": "fat", "items": [%s1], "agent_template": [{"handler": "noop"}]}`, strings.Repeat(`{"pad": "`+strings.Repeat("p", 1000)+`"},`, 300)),
		// Case 4: failures with distinct errors.
		`{"id": "fails", "items": [1, 2, 3, 4, 5, 6, 7, 8], "agent_template": [{"shell": "exit 3", "retry_config": {"attempts": 1}}], "error_policy": {"error_collection": {"batched": {"size": 2}}}}`,
		// Case 5: too many items, and recursive paths over a 120-byte document.
		`{"id": "many", "items": [` + strings.Repeat("0,", 1000) + `0], "agent_template": [{"handler": "noop"}]}`,
		`{"id": "deep", "input": "deep.json", "json_path": "$..*..*..*..*", "agent_template": [{"handler": "noop"}]}`,
		`{"id": "deeper", "input": "deep.json", "json_path": "$..*..*..*..*..*..*", "agent_template": [{"handler": "noop"}]}`,
		`{"input": "deep.json", "json_path": "$..[?match(@.x, \"a\")]", "agent_template": [{"handler": "noop"}]}`,
		`{"input": "items.json", "json_path": "$.items[*]", "group_by": "${item.r}", "agent_template": [{"handler": "noop"}]}`,
		// Case 12: the same id rejected, then submitted corrected.
		`{"id": "again", "agent_template": []}`,
		`{"id": "again", "items": [1], "agent_template": [{"handler": "noop"}]}`,
		// Ordinary specs, JSON and YAML, and garbage.
		`{"id": "plain", "items": [{"id": "a"}, {"id": "b"}], "agent_template": [{"shell": "echo ${item.id}", "timeout": "5s"}],
		  "error_policy": {"on_item_failure": "skip", "circuit_breaker": {"failure_threshold": 2, "timeout": "1m"}},
		  "best_effort": {"min_groups": 1, "deadline": "1m"}, "reduce": [{"shell": "cat ${map.results}"}]}`,
		"id: yaml\nitems: [{id: a}]\nagent_template:\n  - handler: flaky\n    retry_config: {attempts: 3, backoff: fibonacci}\n",
		"",
		"\x00\xff{[",
	}
}
