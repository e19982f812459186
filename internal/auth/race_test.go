//go:build race

package auth_test

// raceEnabled is set when the tests run under the race detector, which
// slows the embedded server (it runs in the test's process) several times.
const raceEnabled = true
