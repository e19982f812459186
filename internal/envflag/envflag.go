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

// Int64 returns getenv(key) as an int64, or def when it is empty or not a
// number.
func Int64(getenv func(string) string, key string, def int64) int64 {
	if v, err := strconv.ParseInt(getenv(key), 10, 64); err == nil {
		return v
	}
	return def
}

// Bool returns getenv(key) as a bool ("true", "1", "false", "0", …), or
// def when it is empty or not a bool.
func Bool(getenv func(string) string, key string, def bool) bool {
	if v, err := strconv.ParseBool(getenv(key)); err == nil {
		return v
	}
	return def
}
