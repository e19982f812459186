// Package envflag gives the binaries' flags their defaults from the
// environment.
package envflag

import (
	"strconv"
	"time"
)

// String returns getenv(key), or def when it is empty.
func String(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// Int returns getenv(key) as an int, or def when it is empty or not a number.
func Int(getenv func(string) string, key string, def int) int {
	if v, err := strconv.Atoi(getenv(key)); err == nil {
		return v
	}
	return def
}

// Duration returns getenv(key) as a duration ("4s"), or def when it is
// empty or not a duration.
func Duration(getenv func(string) string, key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(getenv(key)); err == nil {
		return v
	}
	return def
}
