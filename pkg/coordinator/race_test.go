//go:build race

package coordinator

// raceEnabled: tests built with -race run slower; the soak scales down.
const raceEnabled = true
