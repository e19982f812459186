//go:build linux

package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gone reports whether pid has exited: no such process, or a zombie
// waiting for init (which may be slow to reap orphans in a container).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command name
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// requireGone waits, with a deadline, for pid to be gone: a SIGKILLed
// process finishes dying asynchronously.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return gone(pid) }, 2*time.Second, 5*time.Millisecond, "process %d survived the step", pid)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err, "pid file %q", b)
	return pid
}

func pidWritten(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.HasSuffix(b, []byte("\n"))
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal syscall.Signal
		wantMsg    string
		contains   string
	}{
		{name: "success", script: "echo out", wantCode: 0},
		{name: "exit 3", script: "exit 3", wantCode: 3, wantMsg: "exit status 3"},
		{name: "exit 255", script: "exit 255", wantCode: 255, wantMsg: "exit status 255"},
		{name: "last stderr line", script: "echo first >&2; printf 'conn refused\\n\\n' >&2; exit 7", wantCode: 7, wantMsg: "exit status 7: conn refused"},
		{name: "command not found", script: "no-such-command-jetfleet", wantCode: 127, contains: "exit status 127: "},
		{name: "killed by a signal", script: "kill -KILL $$", wantCode: -1, wantSignal: syscall.SIGKILL, wantMsg: "signal: killed"},
		{name: "stdin is empty", script: "cat", wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := Run(t.Context(), Command{Script: tt.script, Timeout: 10 * time.Second})
			require.NoError(t, res.Err)
			require.Equal(t, tt.wantCode, res.ExitCode)
			require.Equal(t, tt.wantSignal, res.Signal)
			require.False(t, res.TimedOut)
			require.False(t, res.Cancelled)
			failed := tt.wantCode != 0 || tt.wantSignal != 0
			require.Equal(t, failed, res.Failed())
			if !failed {
				require.Empty(t, res.Message())
				require.NoError(t, res.AsError())
				return
			}
			err := res.AsError()
			require.ErrorIs(t, err, ErrExit)
			var re *RunError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.wantCode, re.ExitCode())
			require.Equal(t, res.Message(), err.Error())
			if tt.wantMsg != "" {
				require.Equal(t, tt.wantMsg, res.Message())
			}
			require.Contains(t, res.Message(), tt.contains)
		})
	}
}

func TestRunStdoutIsOutput(t *testing.T) {
	t.Parallel()
	res := Run(t.Context(), Command{Script: "printf 'result\\n'; echo noise >&2"})
	require.False(t, res.Failed())
	require.Equal(t, "result\n", res.Stdout)
	require.Equal(t, "noise\n", res.Stderr)
	require.Equal(t, int64(7), res.StdoutBytes)
	require.Positive(t, res.Duration)
}

func TestRunEnvAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	v := Vars{Item: json.RawMessage(`{"id":"a b","q":"it's"}`), ItemID: "a b", JobID: "job-1", Attempt: 2}
	res := Run(t.Context(), Command{
		Script: `printf '%s|%s|%s|%s|%s|%s|%s' "$ITEM_JSON" "$ITEM_ID" "$JOB_ID" "$ATTEMPT" "$EXTRA" "$HOME" "$(pwd)"`,
		Env:    append(v.Environ(), "EXTRA=x y", "HOME=/overridden"),
		Dir:    dir,
	})
	require.False(t, res.Failed(), res.Message())
	require.Equal(t, `{"id":"a b","q":"it's"}|a b|job-1|2|x y|/overridden|`+dir, res.Stdout)
}

// TestRunEnvIsExactlyCommandEnv: a step sees the environment it is given
// and nothing of the agent's.
func TestRunEnvIsExactlyCommandEnv(t *testing.T) {
	t.Setenv("JETFLEET_SHELL_TEST", "the agent's")
	t.Setenv("NATS_PASSWORD", "hunter2")
	for _, env := range [][]string{nil, {"A=b", "PATH=" + os.Getenv("PATH")}} {
		res := Run(t.Context(), Command{Script: `printf '%s|%s|' "${JETFLEET_SHELL_TEST-unset}" "${NATS_PASSWORD-unset}"; env`, Env: env})
		require.False(t, res.Failed(), res.Message())
		out, list, _ := strings.Cut(res.Stdout, "|unset|")
		require.Equal(t, "unset", out)
		for _, kv := range strings.Split(strings.TrimSpace(list), "\n") {
			name, _, _ := strings.Cut(kv, "=")
			switch name {
			case "A", "PATH", "PWD", "SHLVL", "_", "", EnvStepToken:
			default:
				t.Errorf("the step saw %q", kv)
			}
		}
	}
}

func TestRunStartFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cmd      Command
		wantErr  error
		contains string
	}{
		{name: "missing directory", cmd: Command{Script: "true", Dir: "/nonexistent/jetfleet"}, wantErr: syscall.ENOENT, contains: "shell: cannot start: working directory: stat /nonexistent/jetfleet: no such file or directory"},
		{name: "NUL in script", cmd: Command{Script: "echo a\x00b"}, wantErr: ErrNUL, contains: "NUL byte in the script"},
		{name: "NUL in env", cmd: Command{Script: "true", Env: []string{"ITEM_ID=a\x00b"}}, wantErr: ErrNUL, contains: "environment variable ITEM_ID"},
		{name: "script too long", cmd: Command{Script: "#" + strings.Repeat("x", maxArgLen)}, wantErr: ErrStart, contains: "over the 131071-byte limit"},
		{name: "variable too long", cmd: Command{Script: "true", Env: []string{"ITEM_JSON=" + strings.Repeat("x", maxArgLen)}}, wantErr: ErrStart, contains: "environment variable ITEM_JSON is 131082 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := Run(t.Context(), tt.cmd)
			require.ErrorIs(t, res.Err, ErrStart)
			require.ErrorIs(t, res.Err, tt.wantErr)
			require.Equal(t, -1, res.ExitCode)
			require.True(t, res.Failed())
			require.Contains(t, res.Message(), tt.contains)
			require.ErrorIs(t, res.AsError(), ErrStart)
		})
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	dir := t.TempDir()
	res := Run(ctx, Command{Script: "touch ran", Dir: dir})
	require.True(t, res.Cancelled)
	require.Equal(t, -1, res.ExitCode)
	require.ErrorIs(t, res.AsError(), ErrCancelled)
	require.ErrorIs(t, res.AsError(), context.Canceled)
	require.NoFileExists(t, filepath.Join(dir, "ran"))
}

// groupScript starts a backgrounded grandchild, records its pid and waits.
const groupScript = `sleep 100 & echo $! > "$PIDFILE"; wait`

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     string
		wantSignal syscall.Signal
	}{
		{name: "SIGTERM", script: groupScript, wantSignal: syscall.SIGTERM},
		{name: "SIGKILL after the grace when TERM is ignored", script: "trap '' TERM; " + groupScript, wantSignal: syscall.SIGKILL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pidfile := filepath.Join(t.TempDir(), "pid")
			res := Run(t.Context(), Command{
				Script:    tt.script,
				Env:       []string{"PIDFILE=" + pidfile},
				Timeout:   300 * time.Millisecond,
				KillGrace: 100 * time.Millisecond,
			})
			require.NoError(t, res.Err)
			require.True(t, res.TimedOut)
			require.False(t, res.Cancelled)
			require.Equal(t, -1, res.ExitCode)
			require.Equal(t, tt.wantSignal, res.Signal)
			require.Equal(t, "timeout after 300ms", res.Message())
			require.ErrorIs(t, res.AsError(), ErrTimeout)
			require.ErrorIs(t, res.AsError(), context.DeadlineExceeded)
			require.Less(t, res.Duration, 5*time.Second, "Run must not wait for the grandchild")
			requireGone(t, readPid(t, pidfile))
		})
	}
}

func TestRunCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res := Run(ctx, Command{
		Script: groupScript,
		Env:    []string{"PIDFILE=" + pidfile},
		// The heartbeat cancels once the grandchild is running: no race
		// with a timer.
		Heartbeat: func() {
			if pidWritten(pidfile) {
				cancel()
			}
		},
		HeartbeatInterval: 5 * time.Millisecond,
		Timeout:           10 * time.Second,
		KillGrace:         100 * time.Millisecond,
	})
	require.NoError(t, res.Err)
	require.True(t, res.Cancelled)
	require.False(t, res.TimedOut)
	require.Equal(t, syscall.SIGTERM, res.Signal)
	require.Equal(t, "cancelled", res.Message())
	require.ErrorIs(t, res.AsError(), ErrCancelled)
	require.ErrorIs(t, res.AsError(), context.Canceled)
	requireGone(t, readPid(t, pidfile))
}

// TestRunKillsLeftovers: a background job still running when the shell
// exits is killed, and does not hold Run up through its pipes.
func TestRunKillsLeftovers(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	res := Run(t.Context(), Command{
		Script:    `sleep 100 & echo $! > "$PIDFILE"; echo done`,
		Env:       []string{"PIDFILE=" + pidfile},
		KillGrace: 100 * time.Millisecond,
	})
	require.False(t, res.Failed(), res.Message())
	require.Equal(t, "done\n", res.Stdout)
	require.Less(t, res.Duration, 5*time.Second)
	requireGone(t, readPid(t, pidfile))
}

// escapes are ways a step leaves processes behind outside its process
// group, each writing the pids to reap to files in $DIR.
var escapes = []struct {
	name   string
	script string
	pids   []string // files in $DIR holding a pid that must not survive
}{
	{name: "setsid double fork", pids: []string{"d"},
		script: `setsid sh -c 'sleep 1000 & echo $! > "$1"' sh "$DIR/d.tmp"; mv "$DIR/d.tmp" "$DIR/d"`},
	{name: "nohup in the background", pids: []string{"d"},
		script: `nohup setsid sleep 1000 >/dev/null 2>&1 & echo $! > "$DIR/d"`},
	{name: "daemon holding the output pipes", pids: []string{"d"},
		script: `setsid sh -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 1000' sh "$DIR/d" &
while [ ! -s "$DIR/d" ]; do sleep 0.01; done`},
	{name: "a daemon's child that cleared its environment", pids: []string{"d", "g"},
		script: `setsid sh -c 'env -i sleep 1000 & echo $! > "$1/g.tmp"; mv "$1/g.tmp" "$1/g"; echo $$ > "$1/d.tmp"; mv "$1/d.tmp" "$1/d"; exec sleep 1000' sh "$DIR" &
while [ ! -s "$DIR/d" ]; do sleep 0.01; done`},
}

// reaped reports whether pid is gone for good: neither running nor a
// zombie waiting to be reaped.
func reaped(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// waitReaped fails the test if pid is not reaped within d, saying what
// the process was then (its /proc stat: state, parent, group; whether it
// carried a step token), so that a failure tells the cleanup's miss from
// the sweep's. TestRunKillsEscapedProcesses failed once that way in a
// fresh-clone go test ./... and never again in 30 runs under load.
func waitReaped(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !reaped(pid) {
		if time.Now().After(deadline) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			token := stepToken(pid)
			t.Fatalf("process %d survived the step, or its zombie was not reaped, after %s: stat %q, step token %q, this process %d",
				pid, d, stat, token, os.Getpid())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunKillsEscapedProcesses: whatever a step leaves running outside its
// process group is killed and reaped when the step ends, however it ends,
// and neither it nor its zombie is left.
func TestRunKillsEscapedProcesses(t *testing.T) {
	t.Parallel()
	endings := []struct {
		name    string
		tail    string
		timeout bool
		cancel  bool
		check   func(t *testing.T, res Result)
	}{
		{name: "success", tail: "exit 0", check: func(t *testing.T, res Result) { require.False(t, res.Failed(), res.Message()) }},
		{name: "failure", tail: "exit 3", check: func(t *testing.T, res Result) { require.Equal(t, 3, res.ExitCode, res.Message()) }},
		{name: "timeout", tail: `touch "$DIR/ready"; sleep 1000`, timeout: true, check: func(t *testing.T, res Result) { require.True(t, res.TimedOut, res.Message()) }},
		{name: "cancel", tail: `touch "$DIR/ready"; sleep 1000`, cancel: true, check: func(t *testing.T, res Result) { require.True(t, res.Cancelled, res.Message()) }},
	}
	for _, esc := range escapes {
		for _, end := range endings {
			t.Run(esc.name+"/"+end.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				fire := make(chan time.Time, 1)
				var once sync.Once
				res := Run(ctx, Command{
					Script: esc.script + "\n" + end.tail, Env: []string{"DIR=" + dir, "PATH=" + os.Getenv("PATH")},
					KillGrace: 200 * time.Millisecond, Timeout: time.Hour, timeoutC: fire,
					// The step times out, or is cancelled, once it is in its last
					// command, the escape done.
					HeartbeatInterval: 5 * time.Millisecond,
					Heartbeat: func() {
						if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
							return
						}
						once.Do(func() {
							if end.timeout {
								fire <- time.Now()
							}
							if end.cancel {
								cancel()
							}
						})
					},
				})
				end.check(t, res)
				var pids []int
				for _, f := range esc.pids {
					pids = append(pids, readPid(t, filepath.Join(dir, f)))
				}
				for _, pid := range pids {
					// Dead and reaped by the time Run returns, unless the machine is
					// so slow that the cleanup's grace ran out: then the reaper
					// finishes it.
					waitReaped(t, pid, 5*time.Second)
				}
				require.Less(t, res.Duration, 5*time.Second, "Run waited for an escaped process")
			})
		}
	}
}

func TestRunHeartbeat(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	var (
		calls  atomic.Int32
		once   sync.Once
		writer *os.File
	)
	// The script blocks on the fifo until the first heartbeat writes to it:
	// the process provably ran while the heartbeat was called.
	res := Run(t.Context(), Command{
		Script: `read line < "$FIFO"; printf '%s' "$line"`,
		Env:    []string{"FIFO=" + fifo},
		Heartbeat: func() {
			calls.Add(1)
			once.Do(func() {
				// O_RDWR never blocks on a fifo (Linux); the data waits in the
				// pipe for the reader while writer stays open.
				f, err := os.OpenFile(fifo, os.O_RDWR, 0)
				if err == nil {
					_, _ = f.WriteString("beat\n")
					writer = f
				}
			})
		},
		HeartbeatInterval: 5 * time.Millisecond,
		Timeout:           10 * time.Second,
	})
	if writer != nil {
		require.NoError(t, writer.Close())
	}
	require.False(t, res.Failed(), res.Message())
	require.Equal(t, "beat", res.Stdout)
	require.GreaterOrEqual(t, calls.Load(), int32(1))
}

func TestRunNoHeartbeatAfterReturn(t *testing.T) {
	t.Parallel()
	var running atomic.Bool
	running.Store(true)
	var late atomic.Int32
	res := Run(t.Context(), Command{
		Script: "true",
		Heartbeat: func() {
			if !running.Load() {
				late.Add(1)
			}
		},
		HeartbeatInterval: time.Nanosecond,
	})
	running.Store(false)
	require.False(t, res.Failed())
	require.Zero(t, late.Load())
}

// TestRunOutputBounded: megabytes of output cost TailBytes of memory, and
// the tails hold the last bytes. Not parallel: it measures allocations.
func TestRunOutputBounded(t *testing.T) {
	const tail = 4096
	script := `head -c 16777216 /dev/zero | tr '\0' x; printf END
head -c 1048576 /dev/zero | tr '\0' e >&2; printf '\nlast words\n' >&2; exit 2`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := Run(t.Context(), Command{Script: script, TailBytes: tail, Timeout: 10 * time.Second})
	runtime.ReadMemStats(&after)

	require.Equal(t, 2, res.ExitCode)
	require.Equal(t, int64(16<<20+3), res.StdoutBytes)
	require.Len(t, res.Stdout, tail)
	require.Equal(t, strings.Repeat("x", tail-3)+"END", res.Stdout)
	require.Equal(t, int64(1<<20+len("\nlast words\n")), res.StderrBytes)
	require.Len(t, res.Stderr, tail)
	require.True(t, strings.HasSuffix(res.Stderr, "eee\nlast words\n"))
	require.Equal(t, "exit status 2: last words", res.Message())
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "allocated for 17 MiB of output")
}

func TestRunMessageLongLine(t *testing.T) {
	t.Parallel()
	res := Run(t.Context(), Command{Script: `head -c 2000 /dev/zero | tr '\0' y >&2; exit 1`})
	msg := res.Message()
	require.True(t, strings.HasPrefix(msg, "exit status 1: yyy"))
	require.True(t, strings.HasSuffix(msg, "…"))
	require.Len(t, msg, len("exit status 1: ")+maxMessageLine+len("…"))
}
