//go:build !race

package natstest

// raceEnabled says the binary was built with -race.
const raceEnabled = false
