//go:build linux

package shell

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runHelper runs the named test in a new test process whose subreaper is
// in mode ("all" or "steps"), under the given command prefix (unshare, to
// be PID 1 of a PID namespace), and fails with its output if it fails.
func runHelper(t *testing.T, test, mode string, prefix ...string) {
	t.Helper()
	args := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), envReapMode+"="+mode)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: "+test, "%s", out)
}

// isZombie reports whether pid is a zombie.
func isZombie(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.zombie
}

// TestReapAll: with ReapAll the agent reaps every orphan — one a step's
// daemon leaves after it exits on its own while the step still runs, one
// that no step made — in a process of its own, and as PID 1 of a PID
// namespace (the agent in its container) where unshare is allowed.
func TestReapAll(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestReapAll", "all")
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Log("no unshare: not tested as PID 1")
			return
		}
		if err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").Run(); err != nil {
			t.Logf("unshare --pid not allowed here (%v): not tested as PID 1", err)
			return
		}
		runHelper(t, "TestReapAll", "all", "unshare", "--pid", "--fork", "--mount-proc")
		return
	}
	if os.Getenv(envReapMode) != "all" {
		t.Skip("helper for ReapAll")
	}
	t.Logf("pid %d", os.Getpid())
	dir := t.TempDir()

	// A step's daemon that exits while the step runs: never seen alive by
	// the step's cleanup, it is a zombie child of this process.
	res := Run(t.Context(), Command{
		Script: `setsid sh -c 'sleep 0.05 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"' sh "$DIR/d"; sleep 0.2`,
		Env:    []string{"DIR=" + dir, "PATH=" + os.Getenv("PATH")},
	})
	require.False(t, res.Failed(), res.Message())
	pid := readPid(t, filepath.Join(dir, "d"))
	require.Eventually(t, func() bool { return reaped(pid) }, 5*time.Second, 5*time.Millisecond, "zombie %d not reaped", pid)

	// An orphan no step made: the child of a command this process ran.
	// The sweep may reap the command itself (it reaps every dead child)
	// before os/exec waits for it: its output is still read whole.
	out, err := exec.Command("sh", "-c", `sleep 0.05 & echo $!`).Output()
	if !errors.Is(err, syscall.ECHILD) {
		require.NoError(t, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return reaped(pid) }, 5*time.Second, 5*time.Millisecond, "zombie %d not reaped", pid)
}

// TestReapStepsLeavesOtherChildren: ReapSteps never reaps a child process
// it cannot attribute to a step, so os/exec still gets its exit status.
func TestReapStepsLeavesOtherChildren(t *testing.T) {
	if os.Getpid() == 1 || os.Getenv(envReapMode) == "all" {
		t.Skip("ReapAll reaps every orphan")
	}
	t.Parallel()
	cmd := exec.Command("sh", "-c", "exit 7")
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return isZombie(cmd.Process.Pid) }, 5*time.Second, time.Millisecond)
	r := currentReaper()
	require.NotNil(t, r)
	r.sweep()
	r.sweep()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the exit status was stolen")
	require.Equal(t, 7, ee.ExitCode())
}

// TestReapNeverStealsAStepsStatus: steps starting and ending at once, with
// the subreaper sweeping all the while, all get their own exit status: it
// never reaps a step's shell, which os/exec waits for.
func TestReapNeverStealsAStepsStatus(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestReapNeverStealsAStepsStatus", "all")
		return
	}
	r := currentReaper()
	require.NotNil(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for ctx.Err() == nil {
			r.sweep()
		}
	})
	var steps sync.WaitGroup
	for i := range 40 {
		steps.Go(func() {
			code := i % 5
			res := Run(t.Context(), Command{Script: "(sleep 0.01 &); exit " + strconv.Itoa(code)})
			if res.Err != nil || res.ExitCode != code {
				t.Errorf("step %d: exit code %d, error %v", i, res.ExitCode, res.Err)
			}
		})
	}
	steps.Wait()
	cancel()
	sweeps.Wait()
}

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	tests := []struct {
		name   string
		stat   string
		want   proc
		wantOK bool
	}{
		{"plain", "42 (sh) S 7 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 9001" + tail,
			proc{id: procID{pid: 42, start: 9001}, ppid: 7, pgrp: 42}, true},
		{"name with spaces and parens", "42 (a) b (c) S 7 40 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12" + tail,
			proc{id: procID{pid: 42, start: 12}, ppid: 7, pgrp: 40}, true},
		{"zombie", "42 (a) b (c) Z 7 40 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12" + tail,
			proc{id: procID{pid: 42, start: 12}, ppid: 7, pgrp: 40, zombie: true}, true},
		{"dead", "42 (x) X 7 40 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12\n",
			proc{id: procID{pid: 42, start: 12}, ppid: 7, pgrp: 40, zombie: true}, true},
		{"truncated", "42 (x) S 7 40 42 0 -1 4194560 1 2", proc{}, false},
		{"no name", "42 x S 7 40", proc{}, false},
		{"not a number", "42 (x) S 7a 40 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12\n", proc{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStat(42, []byte(tt.stat))
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func TestReadProcSelf(t *testing.T) {
	p, ok := readProc(os.Getpid())
	require.True(t, ok)
	require.Equal(t, os.Getppid(), p.ppid)
	require.Equal(t, syscall.Getpgrp(), p.pgrp)
	require.False(t, p.zombie)
	require.NotZero(t, p.id.start)
}

// TestCleanupWithoutAPass: steps that leave nothing behind end without a
// pass over /proc (the main thread's children say so), while the escapes
// of escapes are still found, killed and reaped by the step's own cleanup
// before Run returns, not left to the sweep. In a process of its own, so
// that no other test's steps are running.
func TestCleanupWithoutAPass(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestCleanupWithoutAPass", "steps")
		return
	}
	r := currentReaper()
	require.NotNil(t, r)
	if r.childrenPath == "" {
		t.Skip("no /proc/<pid>/task/<tid>/children on this kernel: every cleanup makes a pass")
	}
	var steps sync.WaitGroup
	for i := range 32 {
		steps.Go(func() {
			script := "true"
			if i%2 == 1 {
				script = "sleep 0.01"
			}
			if res := Run(t.Context(), Command{Script: script}); res.Failed() {
				t.Errorf("step %d: %s", i, res.Message())
			}
		})
	}
	steps.Wait()
	require.Zero(t, r.collects.Load(), "a step that left nothing made a pass over /proc")

	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			dir := t.TempDir()
			before := r.collects.Load()
			res := Run(t.Context(), Command{
				Script: esc.script, Env: []string{"DIR=" + dir, "PATH=" + os.Getenv("PATH")}, KillGrace: time.Minute,
			})
			require.False(t, res.Failed(), res.Message())
			require.Greater(t, r.collects.Load(), before, "the escape went unseen")
			for _, f := range esc.pids {
				require.True(t, reaped(readPid(t, filepath.Join(dir, f))), "%s survived the step", f)
			}
		})
	}
}

// TestReapAllSweepsPastStepsShells: with ReapAll, sweeps while steps end
// at a high rate make a pass over /proc only as often as hiddenGap allows,
// not each time a step's shell is dead before its Run reaps it, and still
// reap a dead child no step owns at once.
func TestReapAllSweepsPastStepsShells(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestReapAllSweepsPastStepsShells", "all")
		return
	}
	r := currentReaper()
	require.NotNil(t, r)
	if r.childrenPath == "" {
		t.Skip("no /proc/<pid>/task/<tid>/children on this kernel: every sweep makes a pass")
	}
	ctx, cancel := context.WithCancel(t.Context())
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for ctx.Err() == nil {
			r.sweep()
		}
	})
	start := time.Now()
	var steps sync.WaitGroup
	for i := range 64 {
		steps.Go(func() {
			if res := Run(t.Context(), Command{Script: "true"}); res.Failed() {
				t.Errorf("step %d: %s", i, res.Message())
			}
		})
	}
	steps.Wait()
	cancel()
	sweeps.Wait()
	// One per hiddenGap begun, and room for a rare race of a shell's
	// start or reap with a sweep's look; before, about one per step.
	limit := 3 + int64(time.Since(start)/hiddenGap)
	require.LessOrEqual(t, r.sweepPasses.Load(), limit, "sweeps made a pass for steps' shells")

	// A dead child that is no step's shell is reaped by the next sweep.
	cmd := exec.Command("sh", "-c", "exit 0")
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return isZombie(cmd.Process.Pid) }, 5*time.Second, time.Millisecond)
	r.sweep()
	require.True(t, reaped(cmd.Process.Pid), "the dead child was left")
	_ = cmd.Wait() // ECHILD: ReapAll took it
}

// deadChild finds an exited child that no one has reaped, whichever
// thread started it, names it, and reaps nothing itself.
func TestDeadChildFindsAZombie(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestDeadChildFindsAZombie", "steps")
		return
	}
	_, dead := deadChild()
	require.False(t, dead, "no child yet")
	cmd := exec.Command("sh", "-c", "exit 3")
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return isZombie(cmd.Process.Pid) }, 5*time.Second, time.Millisecond)
	pid, dead := deadChild()
	require.True(t, dead)
	require.Equal(t, cmd.Process.Pid, pid)
	pid, dead = deadChild()
	require.True(t, dead, "the first look reaped it")
	require.Equal(t, cmd.Process.Pid, pid)
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode(), "its status was lost")
	_, dead = deadChild()
	require.False(t, dead)
}

// TestOutputUnderReapAll: a command the program runs with Output keeps its
// exit status and its output though a sweep that reaps every dead child it
// does not know runs while the command is dead and not yet waited for.
func TestOutputUnderReapAll(t *testing.T) {
	if os.Getenv(envReapMode) == "" {
		t.Parallel()
		runHelper(t, "TestOutputUnderReapAll", "all")
		return
	}
	r := currentReaper()
	require.NotNil(t, r)
	outputStarted = func(pid int) {
		require.Eventually(t, func() bool { return isZombie(pid) }, 5*time.Second, time.Millisecond)
		r.sweep()
		require.True(t, isZombie(pid), "the sweep reaped it")
	}
	defer func() { outputStarted = func(int) {} }()
	out, err := Output(exec.Command("sh", "-c", "echo out; exit 3"))
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode())
	require.Equal(t, "out\n", string(out))
}
