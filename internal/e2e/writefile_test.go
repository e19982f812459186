package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
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

// A write_file step in Prodigy's layout writes a JSON file from a captured
// value and the item's fields, without a shell; the next shell step reads
// it back. An item whose values make the content invalid JSON, or whose
// path leads out of its directory once expanded, fails for good with the
// field named, and nothing is written.
func TestWriteFileStep(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	spec, err := jobspec.Parse([]byte(`
name: write-file
commands:
  - shell: "echo '{\"version\": \"1.4.2\"}'"
    capture: meta
    capture_format: json
  - write_file:
      path: "${item.dir}/report.json"
      content: '{"item": "${item.name}", "version": "${meta.version}", "n": ${item.n}}'
      format: json
      mode: "0600"
      create_dirs: true
  - shell: "stat -c %a ${item.dir}/report.json && tr -d ' \n' < ${item.dir}/report.json"
`))
	require.NoError(t, err)
	spec.ID = "write-file"
	spec.Items = []json.RawMessage{
		json.RawMessage(`{"id": "ok", "name": "alpha", "n": 3, "dir": "out/a"}`),
		json.RawMessage(`{"id": "quote", "name": "al\"pha", "n": 1, "dir": "out/q"}`),
		json.RawMessage(`{"id": "escape", "name": "beta", "n": 2, "dir": "../.."}`),
	}

	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 3, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	id := submit(t, cl, string(body))
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 2, st.DeadLettered, "%+v", st)

	found := false
	for _, r := range jobResults(t, srv.JS(), id) {
		if r.ItemID == "ok" {
			found = true
			require.Equal(t, messages.OutcomeSucceeded, r.Outcome)
			require.Equal(t, "600\n{\"item\":\"alpha\",\"version\":\"1.4.2\",\"n\":3}", r.Output, "the shell step reads the file the write_file step wrote")
		}
	}
	require.True(t, found)
	errs := map[string]string{}
	for _, e := range dlqEntries(t, cl, id) {
		errs[e.Entry.ItemID] = e.Entry.Error
	}
	require.Contains(t, errs["quote"], "write_file.content: content is not valid JSON (format: json)")
	require.Contains(t, errs["escape"], `write_file.path: "../../report.json" leads out of the item's directory (..)`)
}

// Prodigy's reduce writes the map results to a file as its debtmap
// workflow does (write_file with content "${map.results}", format json),
// and the next shell step reads the file.
func TestWriteFileReduce(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	out := t.TempDir()
	spec, err := jobspec.Parse([]byte(`
name: reduce-writes
map:
  items: [{"id": "a"}, {"id": "b"}]
  agent_template:
    - shell: "echo done ${item.id}"
reduce:
  - write_file:
      path: ".out/map-results.json"
      content: "${map.results}"
      format: json
      create_dirs: true
  - shell: "jq -r 'map(.item_id) | sort | join(\",\")' .out/map-results.json > ` + out + `/reduce.txt; sed -n 2p .out/map-results.json | cut -c1-3 >> ` + out + `/reduce.txt"
`))
	require.NoError(t, err)
	spec.ID = "write-file-reduce"
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 2, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	body, err := json.Marshal(spec)
	require.NoError(t, err)
	st := waitJob(t, cl, submit(t, cl, string(body)), 60*time.Second)
	require.EqualValues(t, 2, st.Succeeded, "%+v", st)
	got, err := os.ReadFile(filepath.Join(out, "reduce.txt"))
	require.NoError(t, err, "reduce: %+v", st.Reduce)
	require.Equal(t, "a,b\n  {\n", string(got), "the file holds the results' JSON, indented")
}
