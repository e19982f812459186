package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	prov := provision.Config{AckWait: 2 * time.Second, DLQMaxBytes: 64 << 20}
	coord, err := coordinator.New(srv.Connect(t), coordinator.Config{Provision: coordinator.Provision(prov), StatusInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan struct{}, 2)
	go func() { _ = coord.Run(ctx); done <- struct{}{} }()
	<-coord.Ready()
	a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{}, testhooks.Agent{Provision: prov})).HandleBuiltins()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	url := srv.URL()
	path := writeSpec(t, "items: [1, 2]\nagent_template: [{handler: noop}]\n")

	code, _, errOut := cli(t, url, "schedule", "add", "nightly", path, "--cron", "0 61 * * *")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "cron:")
	code, _, errOut = cli(t, url, "schedule", "add", "nightly", path, "--cron", "@daily", "--tz", "Europe/Berlin", "--catchup", "2h")
	require.Equal(t, exitOK, code, errOut)

	code, out, errOut := cli(t, url, "schedule", "trigger", "nightly", "--json")
	require.Equal(t, exitOK, code, errOut)
	var trig map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &trig))
	require.Eventually(t, func() bool {
		code, out, _ := cli(t, url, "schedule", "get", "nightly", "--json")
		var s messages.Schedule
		return code == exitOK && json.Unmarshal([]byte(out), &s) == nil &&
			len(s.Runs) == 1 && s.Runs[0].JobID == trig["job_id"] && s.Runs[0].State == messages.StateSucceeded
	}, 20*time.Second, 50*time.Millisecond)

	code, out, errOut = cli(t, url, "schedule", "get", "nightly")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `cron "@daily" Europe/Berlin`)
	require.Contains(t, out, "catch-up  2h0m0s")

	code, out, _ = cli(t, url, "schedule", "pause", "nightly", "--json")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"paused": true`)
	code, out, _ = cli(t, url, "schedule", "list")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "paused")
	code, _, errOut = cli(t, url, "schedule", "rm", "nightly")
	require.Equal(t, exitOK, code, errOut)
	code, _, _ = cli(t, url, "schedule", "get", "nightly")
	require.Equal(t, exitUsage, code, "an unknown schedule is bad input")
}
