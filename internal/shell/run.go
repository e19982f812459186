package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of [Command].
const (
	// DefaultTailBytes is how much of the end of stdout and of stderr is kept.
	DefaultTailBytes = 8 << 10
	// DefaultKillGrace is how long a process group has between SIGTERM and
	// SIGKILL, and how long Run waits for output pipes held open by
	// processes that left the group.
	DefaultKillGrace = 2 * time.Second
	// DefaultHeartbeatInterval is how often Heartbeat is called.
	DefaultHeartbeatInterval = 5 * time.Second
	// maxMessageLine bounds the stderr line quoted by Result.Message.
	maxMessageLine = 512
)

// shellPath runs every script.
const shellPath = "/bin/sh"

// Command is one run of a shell step. A Command is a plain value; Run does
// not modify it.
type Command struct {
	// Script is run as /bin/sh -c Script, usually the output of [Expand].
	Script string
	// Env is the step's whole environment, NAME=value strings: nothing of
	// the agent's own environment is passed unless it is here ([EnvFilter]
	// selects what may be). For a name set twice the last entry wins.
	// [Vars.Environ] builds ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT.
	Env []string
	// Dir is the working directory. Defaults to the agent's.
	Dir string
	// Timeout bounds the run; the whole process group is then killed.
	// 0 or less = no timeout.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when the group is
	// killed. Defaults to DefaultKillGrace.
	KillGrace time.Duration
	// TailBytes is how many of the last bytes of stdout, and of stderr,
	// are kept. Defaults to DefaultTailBytes.
	TailBytes int
	// Heartbeat, when set, is called every HeartbeatInterval while the
	// process runs (the agent sends JetStream InProgress acks from it). It
	// is called from one goroutine of Run, never concurrently with itself
	// and never after Run returns; it should return promptly.
	Heartbeat func()
	// HeartbeatInterval defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration

	// timeoutC, when set, replaces the Timeout timer: tests fire it.
	timeoutC <-chan time.Time
}

func (c Command) withDefaults() Command {
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.TailBytes <= 0 {
		c.TailBytes = DefaultTailBytes
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	return c
}

// checkDir finds a working directory that exec would report as a failure
// of "fork/exec /bin/sh" (asked only once a start failed: a stat per step
// is a system call on every step's way to its start).
func (c Command) checkDir() error {
	if c.Dir == "" {
		return nil
	}
	fi, err := os.Stat(c.Dir)
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("working directory %s: not a directory", c.Dir)
	}
	return nil
}

// check finds what exec would refuse with a bare EINVAL.
func (c Command) check() error {
	if strings.IndexByte(c.Script, 0) >= 0 {
		return fmt.Errorf("%w in the script", ErrNUL)
	}
	for _, kv := range c.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			name, _, _ := strings.Cut(kv, "=")
			return fmt.Errorf("%w in environment variable %s", ErrNUL, strings.ReplaceAll(name, "\x00", `\0`))
		}
	}
	return nil
}

// Result is the outcome of [Run]. It is a plain value.
type Result struct {
	// ExitCode is the exit status, or -1 when the process died of a signal
	// or did not start.
	ExitCode int
	// Signal is the signal that ended the process, 0 if it exited.
	Signal syscall.Signal
	// TimedOut is set when Command.Timeout expired and Run killed the
	// process group.
	TimedOut bool
	// Cancelled is set when the caller's context ended and Run killed the
	// process group (or did not start it).
	Cancelled bool
	// Stdout and Stderr are the last Command.TailBytes bytes of each
	// stream. Stdout is the step's output.
	Stdout, Stderr string
	// StdoutBytes and StderrBytes count everything the process wrote, kept
	// or not.
	StdoutBytes, StderrBytes int64
	// Killed counts the processes the step left behind outside its process
	// group (daemons, double forks) that were killed when it ended; only
	// with a subreaper ([EnableSubreaper]).
	Killed int
	// Duration is the time from start until the process and its output
	// were done.
	Duration time.Duration
	// Err is set when the process could not be started (it wraps
	// ErrStart), or, never in practice, when waiting for it failed.
	Err error

	timeout time.Duration
	cause   error // context.Cause when Cancelled
}

// Failed reports whether the step failed: not started, timed out,
// cancelled, killed by a signal, or a non-zero exit status.
func (r Result) Failed() bool {
	return r.Err != nil || r.TimedOut || r.Cancelled || r.Signal != 0 || r.ExitCode != 0
}

// Message describes a failure for people and for retry_on matchers:
//
//	exit status 3: <last line of stderr>
//	timeout after 30s: <last line of stderr>
//	cancelled: <last line of stderr>
//	signal: killed: <last line of stderr>
//	shell: cannot start: chdir /nope: no such file or directory
//
// It is "" when the step succeeded.
func (r Result) Message() string {
	var msg string
	switch {
	case r.Err != nil:
		return r.Err.Error()
	case r.TimedOut:
		msg = "timeout after " + r.timeout.String()
	case r.Cancelled:
		msg = "cancelled"
	case r.Signal != 0:
		msg = "signal: " + r.Signal.String()
	case r.ExitCode != 0:
		msg = "exit status " + strconv.Itoa(r.ExitCode)
	default:
		return ""
	}
	if line := lastLine(r.Stderr); line != "" {
		msg += ": " + line
	}
	return msg
}

// lastLine is the last non-blank line of s, trimmed and cut to
// maxMessageLine bytes.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSpace(s)
	if len(s) > maxMessageLine {
		s = strings.ToValidUTF8(s[:maxMessageLine], "") + "…"
	}
	return s
}

// AsError returns nil when the step succeeded and a *RunError otherwise.
func (r Result) AsError() error {
	if !r.Failed() {
		return nil
	}
	return &RunError{Result: r}
}

// RunError is a failed [Result] as an error. Its text is [Result.Message];
// errors.Is matches ErrStart (and the start error), ErrTimeout (and
// context.DeadlineExceeded), ErrCancelled (and the context's cause) or
// ErrExit.
type RunError struct {
	Result Result
}

func (e *RunError) Error() string { return e.Result.Message() }

// ExitCode is the process's exit status, -1 when it did not exit by itself.
func (e *RunError) ExitCode() int { return e.Result.ExitCode }

// Unwrap returns the sentinel of the failure and the error behind it.
func (e *RunError) Unwrap() []error {
	r := e.Result
	switch {
	case r.Err != nil:
		return []error{r.Err}
	case r.TimedOut:
		return []error{ErrTimeout, context.DeadlineExceeded}
	case r.Cancelled:
		if r.cause != nil {
			return []error{ErrCancelled, r.cause}
		}
		return []error{ErrCancelled, context.Canceled}
	}
	return []error{ErrExit}
}

// startError wraps err as a failure to start.
func startError(err error) error {
	if errors.Is(err, ErrStart) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStart, err)
}
