//go:build race

package jobrun

// raceEnabled: tests built with -race run slower; the soak scales down.
const raceEnabled = true
