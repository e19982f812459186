package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The demo is the first thing a newcomer runs: it must start its own
// server, run every item to an outcome, dead-letter some (that is part of
// the show, not a failure) and say nothing alarming on stderr.
func TestDemoRunsToASummary(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, "", "demo", "--items", "60", "--agents", "2", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.True(t, messages.TerminalState(st.State), "%+v", st)
	require.EqualValues(t, 60, st.Items)
	require.Equal(t, st.Items, st.Succeeded+st.DeadLettered, "every demo item succeeds or is dead-lettered: %+v", st)
	require.Positive(t, st.Succeeded)
	require.Positive(t, st.Retries, "the flaky step makes the demo retry")
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		require.NotRegexp(t, `"level":"(warn|error)"|\b(WRN|ERR)\b|panic`, line, "stderr:\n%s", errOut)
	}
}

func TestDemoSummaryForPeople(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, "", "demo", "--items", "20", "--agents", "1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "jetfleet demo: 20 items, 1 agents")
	require.Regexp(t, `job demo-\d+: (succeeded|failed)`, out)
	require.Contains(t, out, "Against a real fleet")
}
