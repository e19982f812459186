package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestPauseCommands(t *testing.T) {
	t.Parallel()
	f := fleettest.RunFleet(t, agent.Builtins(),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) { c.StatusInterval = 20 * time.Millisecond }))
	url := f.Server.URL()
	items := make([]string, 200)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	path := writeSpec(t, "id: cli-pause\nitems: ["+strings.Join(items, ", ")+"]\nagent_template: [{handler: sleep, with: {duration: 20ms}}]\n")
	code, _, errOut := cli(t, url, "submit", path)
	require.Equal(t, exitOK, code, errOut)
	fleettest.WaitFor(t, 10*time.Second, func() error { // accepted
		if code, _, errOut := cli(t, url, "status", "cli-pause"); code != exitOK {
			return fmt.Errorf("status: %s", errOut)
		}
		return nil
	})

	code, out, errOut := cli(t, url, "pause", "cli-pause", "--json")
	require.Equal(t, exitOK, code, errOut)
	var st messages.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, messages.StatePaused, st.State)
	require.Equal(t, messages.PausedByJob, st.PausedBy)

	code, out, errOut = cli(t, url, "status", "cli-pause")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "job cli-pause: paused (by its job)")
	// The list is served from the coordinator's index of the jobs bucket,
	// which follows the record a moment after status does.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		code, out, errOut := cli(t, url, "list", "--state", "paused")
		if code != exitOK || !strings.Contains(out, "cli-pause") {
			return fmt.Errorf("list --state paused: %d %s%s", code, out, errOut)
		}
		return nil
	})

	code, out, errOut = cli(t, url, "pool", "pause", "default", "--json")
	require.Equal(t, exitOK, code, errOut)
	var pr messages.PoolPauseReply
	require.NoError(t, json.Unmarshal([]byte(out), &pr))
	require.True(t, pr.Paused)
	require.NotNil(t, pr.Since)

	// Resumed, the job stays paused while its pool is.
	code, out, errOut = cli(t, url, "resume", "cli-pause", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, messages.StatePaused, st.State)
	require.Equal(t, messages.PausedByPool, st.PausedBy)

	code, out, errOut = cli(t, url, "pool", "resume", "default")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "pool default: running\n", out)

	cl, err := client.New(f.Server.Conn(), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end, err := cl.JobWait(ctx, "cli-pause", 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, messages.StateSucceeded, end.State)
	require.EqualValues(t, 200, end.Succeeded)

	code, _, errOut = cli(t, url, "pause", "cli-pause")
	require.Equal(t, exitFailed, code, "a finished job cannot be paused")
	require.Contains(t, errOut, "already ended")
	code, _, errOut = cli(t, url, "pool", "pause", "no.such")
	require.Equal(t, exitUsage, code, errOut)
	code, _, _ = cli(t, url, "pool", "stop", "default")
	require.Equal(t, exitUsage, code)
}
