package shell

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWatchExitLeavesTheZombie: the exit is seen only once the process has
// exited, and the process is left for its own wait to reap, with its
// status; with a pidfd in the poller and with the blocking fallback.
func TestWatchExitLeavesTheZombie(t *testing.T) {
	noPidfdSupport := func(int, int) (int, error) { return -1, syscall.ENOSYS }
	tests := []struct {
		name string
		open func(int, int) (int, error)
	}{
		{name: "pidfd", open: pidfdOpen},
		{name: "blocking waitid", open: noPidfdSupport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saved := pidfdOpen
			pidfdOpen = tt.open
			defer func() { pidfdOpen = saved; noPidfd.Store(false) }()

			cmd := exec.Command("sh", "-c", "read x; exit 3")
			in, err := cmd.StdinPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			exited := watchExit(cmd.Process.Pid)
			select {
			case err := <-exited:
				t.Fatalf("exit seen while the shell reads: %v", err)
			default:
			}
			require.NoError(t, in.Close())
			select {
			case err := <-exited:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("exit not seen")
			}
			require.True(t, stillDead(cmd.Process.Pid), "the wait reaped it")
			err = cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "its status was lost")
			require.Equal(t, 3, ee.ExitCode())
		})
	}
}

// TestWatchExitOfAZombie: a process that has exited before the wait
// begins (a step of `true` often has) is seen at once, and left for its
// own wait.
func TestWatchExitOfAZombie(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 3")
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return isZombie(cmd.Process.Pid) }, 5*time.Second, time.Millisecond)
	select {
	case err := <-watchExit(cmd.Process.Pid):
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("exit not seen")
	}
	require.True(t, stillDead(cmd.Process.Pid), "the wait reaped it")
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &ee, "its status was lost")
	require.Equal(t, 3, ee.ExitCode())
}

// TestWatchExitParksNoThread: waits for running processes park their
// goroutines in the netpoller, not a thread each in waitid.
func TestWatchExitParksNoThread(t *testing.T) {
	if f := openPidfd(os.Getpid()); f == nil {
		t.Skip("no nonblocking pidfd on this kernel")
	} else {
		require.NoError(t, f.Close())
	}
	const n = 48
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	threads := threadCount(t)
	cmds := make([]*exec.Cmd, n)
	watches := make([]<-chan error, n)
	for i := range cmds {
		cmds[i] = exec.Command("sh", "-c", "read x; true")
		cmds[i].Stdin = r
		require.NoError(t, cmds[i].Start())
		watches[i] = watchExit(cmds[i].Process.Pid)
	}
	require.Eventually(t, func() bool { return parkedWatches() == n }, 10*time.Second, time.Millisecond,
		"every wait parked in the poller")
	require.Less(t, threadCount(t)-threads, n/2, "threads blocked in the waits")
	require.NoError(t, w.Close())
	for i, cmd := range cmds {
		require.NoError(t, <-watches[i])
		require.NoError(t, cmd.Wait())
	}
}

// parkedWatches counts the goroutines parked in the poller in pollExited.
func parkedWatches() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "shell.pollExited") {
			count++
		}
	}
	return count
}

// threadCount is this process's number of threads.
func threadCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}
