// Package natstest runs embedded NATS JetStream servers and clusters inside
// `go test`. It is pkg/fleettest's server half, kept apart so that the
// in-package tests of pkg/agent and pkg/coordinator can start servers while
// pkg/fleettest itself imports those packages (fleettest.RunFleet). Users
// import pkg/fleettest; its doc describes these helpers.
package natstest
