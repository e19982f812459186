// Package e2e holds end-to-end tests of the coordinator and agents together
// on a real embedded JetStream server. It has no non-test code.
package e2e
