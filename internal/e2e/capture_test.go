package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A workflow in Prodigy's layout chaining its steps through captured
// variables, on two agents: a stand-in cargo reports 5 passing tests; the
// captured boolean and number let the build step run (and its
// on_success, which reads its output) and skip the bump step; a step that fails with allow_failure lets the item go on; a field of the captured JSON reaches a later step, whose first run
// fails, so that its retry reads the captures back from the item's state.
func TestCaptureAndWhen(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	bin, logDir := t.TempDir(), t.TempDir()
	log := filepath.Join(logDir, "cargo.log")
	cargo := fmt.Sprintf(`#!/bin/sh
echo "cargo $*" >> %q
case "$1" in
test) echo "running 5 tests"; echo "test result: ok. 5 passed; 0 failed" ;;
metadata) echo '{"packages": [{"name": "demo", "version": "1.4.2", "keywords": ["fast", "safe"]}]}' ;;
build) echo "Finished release" ;;
esac
`, log)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "cargo"), []byte(cargo), 0o700))
	environ := func() []string {
		env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		return env
	}
	mark := filepath.Join(logDir, "report-failed-once")
	spec, err := jobspec.Parse([]byte(`
name: release
commands:
  - shell: "cargo test >/dev/null 2>&1 && echo true || echo false"
    capture: tests_passed
    capture_format: boolean
  - shell: "cargo test 2>&1 | grep -oE '[0-9]+ passed' | cut -d' ' -f1"
    capture_output: test_count
    capture_format: number
  - shell: "cargo metadata --format-version 1"
    capture: pkg
    capture_format: json
    capture_streams:
      exit_code: true
  - shell: "cargo build --release"
    when: "${tests_passed} && ${test_count} > 3"
    on_success:
      shell: "cargo package ${shell.output}"
  - shell: "cargo clippy; exit 2"
    allow_failure: true
  - shell: "test -f ` + mark + ` || { touch ` + mark + `; exit 3; }; cargo report ${pkg.packages[0].version} ${pkg.packages[0].keywords[1]} ${pkg.exit_code} ${test_count} ${item_index}"
    retry_config:
      attempts: 2
      initial_delay: 10ms
  - shell: "cargo bump"
    when: "${test_count} > 10"
`))
	require.NoError(t, err)
	spec.ID = "capture-when"

	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	for _, name := range []string{"a1", "a2"} {
		startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: name, Concurrency: 2, Environ: environ, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	}
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	id := submit(t, cl, string(body))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)

	ran, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "cargo test\ncargo test\ncargo metadata --format-version 1\ncargo build --release\ncargo package Finished release\ncargo clippy\ncargo report 1.4.2 safe 0 5 0\n", string(ran),
		"the build step runs, then its on_success with its output, the bump step does not; the item goes on past the failed clippy step; the report reads the JSON field and the number after its retry")
	res := jobResults(t, srv.JS(), id)
	require.Len(t, res, 1)
	require.Equal(t, "skipped: when: ${test_count} > 10 is false", res[0].Output, "the skipped step says so")
	require.EqualValues(t, 1, st.Retries, "the report step's first run failed")
	require.FileExists(t, mark)
	require.Equal(t, messages.OutcomeSucceeded, res[0].Outcome)
}

// A capture that does not read in its format, or that passes the bound
// on an item's captures, fails its step for good with the reason: no
// value is cut short or passed on.
func TestCaptureRefused(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 4, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	id := submit(t, cl, `{"id": "capture-refused", "items": [{"id": "big", "n": 70000}, {"id": "word", "n": 0}, {"id": "ok", "n": 100}],
		"agent_template": [
			{"shell": "if [ ${item.n} = 0 ]; then echo five; else head -c ${item.n} /dev/zero | tr '\\0' a; fi", "capture": "v", "capture_format": "number", "retry_config": {"attempts": 1}},
			{"shell": "echo never ${v}"}
		]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 0, st.Succeeded, "%+v", st)
	require.EqualValues(t, 3, st.DeadLettered)
	errs := map[string]string{}
	for _, e := range dlqEntries(t, cl, id) {
		errs[e.Entry.ItemID] = e.Entry.Error
	}
	require.Contains(t, errs["big"], "capture v: the output is 70000 bytes, over the bound of 65536 bytes on an item's captures")
	require.Contains(t, errs["word"], `capture v: capture_format number: the output "five" is not a number`)
	require.Contains(t, errs["ok"], `capture v: capture_format number: the output "aaaa`)
}
