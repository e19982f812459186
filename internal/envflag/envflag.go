// Package envflag gives the binaries' flags their defaults from the
// environment.
//
// An Env reads the defaults while the flags are registered and records
// every malformed variable; the binary checks Env.Err once after parsing
// its flags and refuses to start (exit code 2, like a bad flag) on one,
// so a mistyped FLEET_CONCURRENCY=abc never runs with the default instead.
package envflag

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Error is an environment variable whose value is not what its flag
// takes.
type Error struct {
	Key   string // the variable, e.g. FLEET_CONCURRENCY
	Value string // its value, as set
	Want  string // what it should be, e.g. "an integer"
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %q is not %s", e.Key, e.Value, e.Want)
}

// Env reads flag defaults from the environment through getenv and records
// the malformed ones.
type Env struct {
	getenv func(string) string
	errs   []error
}

// New returns an Env that reads through getenv.
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Err is every malformed variable read so far (errors.Join of *Error, in
// the order read), or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// String returns the variable key, or def when it is empty.
func (e *Env) String(key, def string) string {
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

// Int returns the variable key as an int, or def when it is empty.
func (e *Env) Int(key string, def int) int {
	return read(e, key, def, "an integer", strconv.Atoi)
}

// Int64 returns the variable key as an int64, or def when it is empty.
func (e *Env) Int64(key string, def int64) int64 {
	return read(e, key, def, "an integer", func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
}

// Duration returns the variable key as a duration ("4s", "1m30s"), or def
// when it is empty.
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	return read(e, key, def, `a duration (e.g. "30s", "5m")`, time.ParseDuration)
}

// Bool returns the variable key as a bool ("true", "1", "false", "0", …),
// or def when it is empty.
func (e *Env) Bool(key string, def bool) bool {
	return read(e, key, def, "a bool (true, false, 1, 0)", strconv.ParseBool)
}

// read parses the variable key, or records an Error and returns def when
// it is set but malformed.
func read[T any](e *Env, key string, def T, want string, parse func(string) (T, error)) T {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		e.errs = append(e.errs, &Error{Key: key, Value: v, Want: want})
		return def
	}
	return x
}

// ExitCode is the exit status of a binary whose run returned err: 2 when
// err holds a malformed variable (a usage error, as a bad flag is), else 1.
func ExitCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return 2
	}
	return 1
}
