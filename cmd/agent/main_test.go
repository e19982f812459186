package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

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
