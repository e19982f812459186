//go:build !race

package e2e

// raceEnabled is set when the tests run under the race detector, which
// makes the agents' failure path about twenty times slower.
const raceEnabled = false
