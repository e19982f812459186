package shell

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Run runs c.Script with /bin/sh -c in a process group of its own, stdin
// from /dev/null and exactly c.Env as its environment, and waits for it.
// Run is safe for concurrent use.
//
// When c.Timeout expires or ctx ends, the whole group gets SIGTERM, then
// SIGKILL after c.KillGrace. When the shell itself exits, whatever it left
// running in its group (background jobs) is killed with SIGKILL. When the
// process is a child subreaper ([EnableSubreaper]), what left the group
// (setsid, nohup and double-fork daemons, and everything they started) is
// found, killed and reaped too, so a step leaves nothing behind; without
// one, such processes survive the step, and the output pipes they hold are
// closed c.KillGrace after the shell exits.
//
// The group is only ever signalled while its leader, the shell, is not yet
// reaped, so its id cannot have been reused by another process group.
//
// The script and each Env entry must be shorter than 128 KiB, Linux's
// limit for one exec string (ITEM_JSON of a larger item would not fit).
//
// Run does not return an error: failures to start are in Result.Err, and
// [Result.Failed], [Result.Message] and [Result.AsError] describe the rest.
func Run(ctx context.Context, c Command) Result {
	c = c.withDefaults()
	res := Result{ExitCode: -1, timeout: c.Timeout}
	if err := c.check(); err != nil {
		res.Err = startError(err)
		return res
	}
	if err := checkArgLen(c); err != nil {
		res.Err = startError(err)
		return res
	}
	if ctx.Err() != nil {
		res.Cancelled, res.cause = true, context.Cause(ctx)
		return res
	}

	stdout, stderr := newTailWriter(c.TailBytes), newTailWriter(c.TailBytes)
	cmd := exec.Command(shellPath, "-c", c.Script)
	cmd.Env = append([]string{}, c.Env...) // never nil: nil would pass the agent's environment
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if null, err := devNull(); err == nil {
		cmd.Stdin = null // else os/exec opens it
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = c.KillGrace

	r := currentReaper()
	var token string
	var starting chan struct{}
	if r != nil {
		token = r.beginStep()
		cmd.Env = append(cmd.Env, EnvStepToken+"="+token)
		starting = r.startBegins()
	}
	start := time.Now()
	err := cmd.Start()
	if r != nil {
		if err == nil {
			r.started(cmd.Process.Pid)
		}
		r.startEnds(starting)
	}
	if err != nil {
		if r != nil {
			r.endStep(token, 0)
		}
		if derr := c.checkDir(); derr != nil {
			err = derr
		}
		res.Err = startError(err)
		res.Duration = time.Since(start)
		return res
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the shell

	exited := watchExit(pgid)

	var beats *heartbeat
	if c.Heartbeat != nil {
		beats = startHeartbeat(c.Heartbeat, c.HeartbeatInterval)
	}

	var timeoutC <-chan time.Time
	if c.Timeout > 0 {
		t := time.NewTimer(c.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	if c.timeoutC != nil {
		timeoutC = c.timeoutC
	}

	var waitErr error
	done := false
	select {
	case waitErr = <-exited:
		done = true
	case <-timeoutC:
		res.TimedOut = true
	case <-ctx.Done():
		res.Cancelled, res.cause = true, context.Cause(ctx)
	}
	if !done {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(c.KillGrace)
		select {
		case waitErr = <-exited:
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			waitErr = <-exited
		}
		grace.Stop()
	}
	// The shell has exited but is not reaped: the group id is still ours.
	// Kill what it left behind, so Wait is not held up by their pipes and
	// nothing outlives the step; a subreaper also finds what left the
	// group, now reparented to this process.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if r != nil {
		res.Killed = r.cleanup(token, pgid, c.KillGrace)
	}
	if beats != nil {
		beats.stop()
	}

	err = cmd.Wait()
	if r != nil {
		r.endStep(token, pgid)
	}
	res.Duration = time.Since(start)
	res.Stdout, res.StdoutBytes = stdout.String(), stdout.Total()
	res.Stderr, res.StderrBytes = stderr.String(), stderr.Total()
	if st := cmd.ProcessState; st != nil {
		res.ExitCode = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal()
		}
	}
	if waitErr != nil {
		res.Err = fmt.Errorf("shell: waiting for the process: %w", waitErr)
	} else if err != nil && cmd.ProcessState == nil {
		res.Err = fmt.Errorf("shell: waiting for the process: %w", err)
	}
	// exec.ErrWaitDelay (pipes closed while an escaped process held them)
	// and *exec.ExitError are described by the fields above.
	return res
}

// devNull is /dev/null opened once for every step's stdin: os/exec would
// open and close it for each. A child gets its own copy of the descriptor;
// this one is never closed.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// maxArgLen is Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the longest
// single argument or NAME=value string exec accepts, NUL included.
const maxArgLen = 32 * 4096

// checkArgLen names what exec would refuse with a bare E2BIG.
func checkArgLen(c Command) error {
	if len(c.Script) >= maxArgLen {
		return fmt.Errorf("the script is %d bytes, over the %d-byte limit of one exec argument", len(c.Script), maxArgLen-1)
	}
	for _, kv := range c.Env {
		if len(kv) >= maxArgLen {
			name, _, _ := strings.Cut(kv, "=")
			return fmt.Errorf("environment variable %s is %d bytes, over the %d-byte limit of one exec string", name, len(kv), maxArgLen-1)
		}
	}
	return nil
}

// heartbeat calls beat every interval from a timer until stop: no
// goroutine waits for a step's heartbeats between them.
type heartbeat struct {
	beat    func()
	every   time.Duration
	mu      sync.Mutex // held while beat runs
	stopped bool
	t       *time.Timer
}

func startHeartbeat(beat func(), every time.Duration) *heartbeat {
	h := &heartbeat{beat: beat, every: every}
	h.mu.Lock()
	h.t = time.AfterFunc(every, h.fire)
	h.mu.Unlock()
	return h
}

func (h *heartbeat) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return // the process ended while the timer fired
	}
	h.beat()
	h.t.Reset(h.every) // after the beat: never two at once
}

// stop ends the heartbeats once a beat under way has returned: none is
// called after it.
func (h *heartbeat) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.t.Stop()
}
