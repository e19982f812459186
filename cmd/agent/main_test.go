package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/natsconn"
)

func TestDeniedConsumerCreate(t *testing.T) {
	denied := func(subject string) error {
		return fmt.Errorf("%w: Permissions Violation for Publish to %q", nats.ErrPermissionViolation, subject)
	}
	require.True(t, deniedConsumerCreate(denied("$JS.API.CONSUMER.CREATE.FLEET_WORK.agents-gpu.fleet.work.gpu.>"), "fleet"))
	require.True(t, deniedConsumerCreate(denied("$JS.hub.API.CONSUMER.CREATE.ACME_WORK.agents-gpu"), "acme"), "a JetStream domain")
	require.False(t, deniedConsumerCreate(denied("$JS.API.CONSUMER.CREATE.FLEET_WORKS.x"), "fleet"))
	require.False(t, deniedConsumerCreate(denied("$JS.API.CONSUMER.CREATE.FLEET_DLQ.x"), "fleet"))
	require.False(t, deniedConsumerCreate(denied("fleet.work.gpu.job"), "fleet"))
	require.False(t, deniedConsumerCreate(fmt.Errorf("nats: timeout CONSUMER.CREATE.FLEET_WORK.x"), "fleet"))
}

// A context that cannot be read stops the agent at start, naming it.
func TestUnreadableContextIsRefused(t *testing.T) {
	env := func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return t.TempDir()
		}
		return ""
	}
	err := run(context.Background(), []string{"--context", "nope"}, env)
	require.ErrorIs(t, err, natsconn.ErrContext)
	require.ErrorContains(t, err, `"nope"`)
}

// A malformed variable stops the agent at start with a usage error (exit
// code 2) naming it, its value and what it should be, rather than running
// with the flag's default.
func TestMalformedEnvironmentIsRefused(t *testing.T) {
	tests := []struct{ key, value, want string }{
		{"FLEET_CONCURRENCY", "abc", `FLEET_CONCURRENCY: "abc" is not an integer`},
		{"FLEET_SHUTDOWN_TIMEOUT", "5x", `FLEET_SHUTDOWN_TIMEOUT: "5x" is not a duration`},
		{"FLEET_KILL_GRACE", "10", `FLEET_KILL_GRACE: "10" is not a duration`},
		{"FLEET_STEP_ENV_UNSAFE", "yes", `FLEET_STEP_ENV_UNSAFE: "yes" is not a bool`},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			env := func(k string) string {
				if k == tt.key {
					return tt.value
				}
				return ""
			}
			err := run(context.Background(), nil, env)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, 2, envflag.ExitCode(err))
		})
	}
}
