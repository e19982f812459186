package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// What a setup step captures, every map and reduce item reads: a string
// and a JSON value captured by the setup reach each map step (in a command
// and in a when: condition) and the reduce, and an item's own capture of
// the same name wins over the setup's.
func TestSetupCapturesReachItems(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submitYAML(t, cl, "setup-captures", `
name: setup variables
mode: mapreduce
setup:
  - shell: "echo v1.2"
    capture: version
  - shell: "echo '{\"branch\": \"main\", \"limit\": 2}'"
    capture: info
    capture_format: json
  - shell: "printf '[{\"n\": 1}, {\"n\": 2}, {\"n\": 3}]' > numbers.json"
map:
  input: numbers.json
  agent_template:
    - shell: "echo ${item.n}:${version}:${info.branch} >> `+out+`/seen"
    - shell: "echo ${item.n} >> `+out+`/over"
      when: "${item.n} > ${info.limit}"
    - shell: "echo own-${item.n}"
      capture: version
    - shell: "echo ${version} >> `+out+`/own"
reduce:
  - shell: "echo ${version} ${info.branch} ${map.successful} > `+out+`/summary"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.CompletionAllCompleted, st.CompletionReason, "%+v", st)
	require.EqualValues(t, 3, st.Items)
	require.EqualValues(t, 3, st.Succeeded)
	require.NotNil(t, st.Reduce)
	require.Equal(t, messages.OutcomeSucceeded, st.Reduce.State)

	seen := lines(t, filepath.Join(out, "seen"))
	sort.Strings(seen)
	require.Equal(t, []string{"1:v1.2:main", "2:v1.2:main", "3:v1.2:main"}, seen, "the setup's string and a field of its JSON")
	require.Equal(t, []string{"3"}, lines(t, filepath.Join(out, "over")), "when: reads the setup's JSON")
	own := lines(t, filepath.Join(out, "own"))
	sort.Strings(own)
	require.Equal(t, []string{"own-1", "own-2", "own-3"}, own, "an item's own capture wins")
	summary, err := os.ReadFile(filepath.Join(out, "summary"))
	require.NoError(t, err)
	require.Equal(t, "v1.2 main 3\n", string(summary), "the reduce reads the setup's captures")
}

// A setup whose captures are over the bound on an item's captures fails
// the job with that bound in its status, before any item runs.
func TestSetupCapturesOverBound(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cl := setupFleet(t)
	id := submitYAML(t, cl, "setup-captures-big", `
mode: mapreduce
setup:
  - shell: "head -c 70000 /dev/zero | tr '\\0' x"
    capture: big
  - shell: "echo '[{\"n\": 1}]' > numbers.json"
map:
  input: numbers.json
  agent_template:
    - shell: "touch `+out+`/ran"
`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.Equal(t, messages.StateFailed, st.State)
	require.NotNil(t, st.Setup)
	require.Equal(t, messages.OutcomeFailed, st.Setup.State)
	require.Contains(t, st.Setup.Error, "capture big")
	require.Contains(t, st.Setup.Error, "over the bound of 65536 bytes")
	require.NoFileExists(t, filepath.Join(out, "ran"))
}
