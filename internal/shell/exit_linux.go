//go:build linux

package shell

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Waiting for a step's shell to exit without reaping it. Run needs to know
// that the shell has exited while it is still a zombie: its process group
// id is then still its own, so the group can be killed and what it left
// cleaned up before cmd.Wait reaps it.
//
// A blocking waitid holds an OS thread for each running step, and each
// exit wakes that thread and hands its P around (entersyscallblock,
// handoffp): with 32 steps of 50 ms each, a good part of an agent's
// scheduling. A pidfd (pidfd_open, Linux 5.3; nonblocking, 5.10) becomes
// readable when its process exits, so the wait parks a goroutine in Go's
// netpoller instead, and a waitid with WNOHANG|WNOWAIT on the pidfd
// (P_PIDFD, Linux 5.4) confirms the exit without reaping. Where the kernel
// has no such pidfd, or the poller does not take it, the blocking waitid
// on the pid is the fallback. Neither reaps: the subreaper's rules (a
// running step's shell is reaped by its Run's cmd.Wait alone) hold as
// before.

// watchExit returns a channel that receives, once, nil when the process
// pid (a child of this process that no one else reaps) has exited, or the
// error that stopped the wait. It reaps nothing.
func watchExit(pid int) <-chan error {
	exited := make(chan error, 1)
	if f := openPidfd(pid); f != nil {
		go func() {
			err := pollExited(f)
			_ = f.Close()
			if errors.Is(err, errNotPolled) {
				err = waitExited(pid)
			}
			exited <- err
		}()
		return exited
	}
	go func() { exited <- waitExited(pid) }()
	return exited
}

// noPidfd is set once pidfd_open has failed for want of kernel support:
// the later steps go straight to the blocking wait.
var noPidfd atomic.Bool

// pidfdOpen is unix.PidfdOpen (tests replace it).
var pidfdOpen = unix.PidfdOpen

// openPidfd returns a nonblocking pidfd of pid as a file in the poller,
// nil when there is none to be had.
func openPidfd(pid int) *os.File {
	if noPidfd.Load() {
		return nil
	}
	fd, err := pidfdOpen(pid, unix.PIDFD_NONBLOCK)
	for errors.Is(err, syscall.EINTR) {
		fd, err = pidfdOpen(pid, unix.PIDFD_NONBLOCK)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM) {
			noPidfd.Store(true) // an old kernel, or a seccomp filter
		}
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// errNotPolled: the pidfd could not be waited for in the poller.
var errNotPolled = errors.New("shell: pidfd not pollable")

// pollExited waits in the netpoller until the process of the pidfd f has
// exited. It reaps nothing (WNOWAIT). errNotPolled means the wait did not
// happen and is to be made otherwise.
func pollExited(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return errNotPolled
	}
	var werr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			var info unix.Siginfo
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			switch {
			case errors.Is(werr, syscall.EINTR):
				continue
			case errors.Is(werr, syscall.EAGAIN):
				werr = nil
				return false // not yet: wait until the pidfd is readable
			case werr != nil:
				return true
			}
			return info.Signo != 0 // 0: not yet (WNOHANG)
		}
	})
	switch {
	case err != nil:
		// A file the poller did not take cannot be waited on there
		// (the callback ran once and said not yet).
		return errNotPolled
	case errors.Is(werr, syscall.EINVAL) || errors.Is(werr, syscall.ENOSYS):
		noPidfd.Store(true) // no P_PIDFD in waitid
		return errNotPolled
	}
	return werr
}

// waitExited blocks until the process pid has exited, without reaping it.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
