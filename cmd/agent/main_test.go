package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
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
