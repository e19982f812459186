package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	code, out, _ := cli(t, "", "--version")
	require.Equal(t, exitOK, code)
	require.Equal(t, "fleetctl "+version.Get().String()+"\n", out)
}

// fleetctl version lists the coordinator (its micro service info) and
// every agent (its presence), each with its build.
func TestVersionListsTheFleet(t *testing.T) {
	t.Parallel()
	f := fleettest.RunFleet(t, nil, fleettest.WithAgents(2),
		fleettest.WithAgentConfig(func(i int, c *agent.Config) {
			c.Name = fmt.Sprintf("a%d", i)
			c.PresenceInterval = 100 * time.Millisecond
		}))
	build := version.Get().String()
	var got fleetVersions
	require.Eventually(t, func() bool {
		code, out, errOut := cli(t, f.Server.URL(), "version", "--json", "--wait", "300ms")
		require.Equal(t, exitOK, code, errOut)
		got = fleetVersions{}
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		return len(got.Coordinators) == 1 && len(got.Agents) == 2
	}, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, version.Get(), got.Fleetctl)
	require.Equal(t, build, got.Coordinators[0].Build)
	require.Equal(t, version.Get().Semver(), got.Coordinators[0].Version)
	for i, a := range got.Agents {
		require.Equal(t, agentVersion{Name: fmt.Sprintf("a%d", i), Pool: "default", Host: a.Host, Version: build}, a)
	}

	// The text form, asked again until the coordinator answers within
	// the 300 ms, as the JSON form above (a loaded machine can take longer
	// once).
	coord := regexp.MustCompile(`(?m)^coordinator +` + got.Coordinators[0].ID + ` +` + regexp.QuoteMeta(build) + `$`)
	var out string
	require.Eventually(t, func() bool {
		var code int
		var errOut string
		code, out, errOut = cli(t, f.Server.URL(), "version", "--wait", "300ms")
		require.Equal(t, exitOK, code, errOut)
		return coord.MatchString(out)
	}, 20*time.Second, 100*time.Millisecond, "the coordinator listed in the text form")
	require.Contains(t, out, "fleetctl     "+build)
	require.Regexp(t, `(?m)^agent +default/a1 +`+regexp.QuoteMeta(build)+`$`, out)
}
