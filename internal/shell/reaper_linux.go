//go:build linux

package shell

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The subreaper. When a step's shell exits, the kernel reparents whatever
// the step left running — background jobs, setsid daemons, the grandchild
// of a double fork — to the nearest child subreaper among its ancestors:
// this process, once EnableSubreaper has run. Run then finds those
// processes in /proc among this process's children, by the token in their
// environment (EnvStepToken), kills them, waits until they are dead and
// reaps them; what they had started is reparented to this process in turn
// and goes the same way. It never waits for a process that os/exec started
// and waits for itself (a running step's shell), so no exit status is
// stolen: no wait(-1), only waits for single pids it has checked, and
// never while a step's shell is being started (between fork and the
// moment Run knows its pid).

// reaper is the process-wide subreaper state.
type reaper struct {
	// scan serialises the passes over /proc (collect passes and sweeps):
	// only they reap children other than steps' shells, so a child a pass
	// saw alive is not reaped by anyone else before that pass acts on it.
	scan sync.Mutex
	// starting is read-locked while a step's shell is started and its pid
	// recorded, and write-locked while a pass lists, kills or reaps
	// children (not while it reads /proc): a pass never takes a step's
	// shell, not yet exec'd, for a child of no step.
	starting sync.RWMutex

	// starts holds, under mu, a channel for each step whose shell is
	// being started, closed once its pid is recorded or the start failed
	// (leftNothing waits on them).
	starts map[chan struct{}]struct{}

	mu   sync.Mutex
	mode ReapMode
	self int
	// childrenPath is the main thread's children file, "" when the
	// kernel has none (see leftNothing); childrenFd is it open, for
	// good: each read at offset 0 lists the children anew (seq_file).
	childrenPath string
	childrenFd   int
	shells       map[int]int       // pids of running steps' shells (os/exec waits for them): count
	active       map[string]bool   // tokens of running steps
	adopted      map[procID]string // orphans seen alive: the token of their step ("" = none)
	swept        time.Time         // when the last sweep's pass over /proc began

	// Steps that end together share one pass over /proc (collectShared):
	// pend holds the requests waiting for the next pass, passing is set
	// while one runs.
	passMu  sync.Mutex
	pend    []*collectReq
	passing bool
	// collects counts the collect passes run, sweepPasses the sweeps'
	// passes (tests).
	collects    atomic.Int64
	sweepPasses atomic.Int64
}

// collectReq is one step's request for a collect pass, and its answer.
type collectReq struct {
	token  string
	pgid   int
	killed map[procID]bool
	left   int           // the answer: the step's processes still there
	done   chan struct{} // closed once left is set
}

// procID identifies a process across pid reuse.
type procID struct {
	pid   int
	start uint64 // start time, in clock ticks after boot
}

var (
	reaperMu sync.Mutex
	theReap  *reaper
)

// EnableSubreaper makes this process a child subreaper (Linux's
// PR_SET_CHILD_SUBREAPER): orphans of its descendants are reparented to
// it instead of to init. From then on [Run] gives each step a token
// (EnvStepToken) and, when the step ends, kills and reaps every process it
// left behind, in its process group or not; run [Reap] to reap orphans
// that exit on their own. mode chooses what happens to other orphans.
// It is process-wide and may be called again: the mode only widens.
func EnableSubreaper(mode ReapMode) error {
	if mode != ReapSteps && mode != ReapAll {
		return fmt.Errorf("shell: child subreaper: unknown mode %d", mode)
	}
	reaperMu.Lock()
	defer reaperMu.Unlock()
	if theReap == nil {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("shell: child subreaper: %w", err)
		}
		// A token inherited from a step that started this process would
		// mark every child it starts as that (ended) step's leftover.
		_ = os.Unsetenv(EnvStepToken)
		self := os.Getpid()
		theReap = &reaper{self: self, shells: map[int]int{}, starts: map[chan struct{}]struct{}{}, active: map[string]bool{}, adopted: map[procID]string{}}
		path := "/proc/" + strconv.Itoa(self) + "/task/" + strconv.Itoa(self) + "/children"
		if fd, ok := openChildren(path); ok {
			theReap.childrenPath, theReap.childrenFd = path, fd
		}
	}
	theReap.mu.Lock()
	theReap.mode = max(theReap.mode, mode)
	theReap.mu.Unlock()
	return nil
}

// Subreaping reports whether [EnableSubreaper] has made the process a
// child subreaper: from then on no process a step started outlives it.
func Subreaping() bool { return currentReaper() != nil }

// currentReaper returns the subreaper, nil when not enabled.
func currentReaper() *reaper {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	return theReap
}

// Reap reaps, until ctx ends, the orphans that exit while no step is
// ending (on SIGCHLD, and every second in case a signal was merged): those
// of steps always, and every other one with ReapAll. It kills processes
// marked with the token of a step that has ended (the step's own cleanup
// gave up on them). It returns at once when EnableSubreaper has not run.
// Several Reap loops may run at once.
func Reap(ctx context.Context) {
	r := currentReaper()
	if r == nil {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.sweep()
		last := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-sig:
			// Every step's shell sends SIGCHLD as it exits, and its own
			// cleanup finds what it left: sweep at most every sweepGap, so
			// that steps ending at a high rate do not each cost a pass over
			// /proc here too. Signals meanwhile merge into one.
			if wait := sweepGap - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		case <-tick.C:
		}
	}
}

// sweepGap is the shortest time between two sweeps of Reap woken by
// SIGCHLD: an orphan that exits on its own stays a zombie at most this
// much longer.
const sweepGap = 50 * time.Millisecond

// beginStep registers a step about to start and returns its token.
func (r *reaper) beginStep() string {
	token := rand.Text()
	r.mu.Lock()
	r.active[token] = true
	r.mu.Unlock()
	return token
}

// startBegins is called before a step's shell is started, startEnds once
// its pid is recorded (started) or the start failed.
func (r *reaper) startBegins() (done chan struct{}) {
	r.starting.RLock()
	done = make(chan struct{})
	r.mu.Lock()
	r.starts[done] = struct{}{}
	r.mu.Unlock()
	return done
}

func (r *reaper) startEnds(done chan struct{}) {
	r.mu.Lock()
	delete(r.starts, done)
	r.mu.Unlock()
	close(done)
	r.starting.RUnlock()
}

// started records the pid of a step's shell, which os/exec waits for.
func (r *reaper) started(pid int) {
	r.mu.Lock()
	r.shells[pid]++
	r.mu.Unlock()
}

// endStep forgets a step whose shell (pid, 0 if it did not start) has been
// waited for.
func (r *reaper) endStep(token string, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.active, token)
	if pid > 0 {
		if r.shells[pid]--; r.shells[pid] <= 0 {
			delete(r.shells, pid)
		}
	}
}

// child is one child process of this process, from /proc.
type child struct {
	id     procID
	pgrp   int
	zombie bool
	token  string // EnvStepToken in its environment, "" when none or unreadable
}

// proc is one process of /proc.
type proc struct {
	id     procID
	ppid   int
	pgrp   int
	zombie bool
}

// cleanup kills and reaps, until none is left or grace has passed, the
// processes that the step with token and process group pgid left behind.
// It returns how many it killed.
func (r *reaper) cleanup(token string, pgid int, grace time.Duration) int {
	if r.leftNothing(token, pgid) {
		return 0
	}
	deadline := time.Now().Add(grace)
	killed := map[procID]bool{}
	for {
		left := r.collectShared(token, pgid, killed)
		if left == 0 || time.Now().After(deadline) {
			return len(killed)
		}
		time.Sleep(2 * time.Millisecond) // SIGKILLed processes finish dying
	}
}

// Telling that a step left nothing, without a pass over /proc. A step's
// shell is waited for by os/exec, but when it exits the kernel hands what
// it leaves running to this process before the exit can be waited for:
// exit_notify reparents the dying shell's children (forget_original_parent)
// before it marks the shell a zombie. A child subreaper takes orphans on
// its first live thread (find_new_reaper, find_alive_thread, kernel/exit.c),
// the main one, whose children /proc/<pid>/task/<pid>/children lists. A
// tree of processes left behind keeps its root there until the root is
// reaped. So once a step's shell has exited, the step's cleanup reads that
// list instead of every process's stat file, and goes down the pass over
// /proc (a few system calls per process on the machine, and the lock that
// holds every step's start back) only when a child there is the step's by
// the pass's own rules: in its process group, adopted for it, or with its
// token. With ReapAll, an orphan no running step owns is the step's too,
// and a child whose start is not yet recorded looks like one: the cleanup
// waits for the starts under way to end, then asks again.

// leftNothing reports that the step with token and process group pgid left
// no process that its cleanup would act on; false when that cannot be told
// without a pass (the kernel has no children file). With token "" (a
// sweep) it reports that no child but running steps' shells is there.
func (r *reaper) leftNothing(token string, pgid int) bool {
	if r.childrenPath == "" {
		return false
	}
	var buf [childrenBufSize]byte
	unknown, ok := r.notShells(buf[:0], nil)
	switch {
	case !ok:
		return false
	case len(unknown) == 0:
		return true
	}
	r.mu.Lock()
	mode := r.mode
	r.mu.Unlock()
	if mode == ReapSteps && token != "" {
		return !r.anyOfStep(unknown, token, pgid)
	}
	// Asked again after the starts under way: a shell not yet recorded is
	// recorded then, and one that its Run reaped between the read and the
	// look at the shells is gone from the list.
	r.waitStarts()
	again, ok := r.notShells(buf[:0], unknown)
	return ok && len(again) == 0
}

// waitStarts waits until the starts of steps' shells under way now have
// ended: their pids recorded, or the starts failed.
func (r *reaper) waitStarts() {
	r.mu.Lock()
	starting := make([]chan struct{}, 0, len(r.starts))
	for done := range r.starts {
		starting = append(starting, done)
	}
	r.mu.Unlock()
	for _, done := range starting {
		<-done
	}
}

// anyOfStep reports whether one of pids is a child of this process that
// collectLocked, with ReapSteps, counts as the step's. A shell whose start
// is not yet recorded is not: it has its own step's token, or before its
// exec this process's environment (which has none) and process group.
func (r *reaper) anyOfStep(pids []int, token string, pgid int) bool {
	for _, pid := range pids {
		p, ok := readProc(pid)
		if !ok || p.ppid != r.self {
			continue // reaped since, or no longer this process's child
		}
		if p.pgrp == pgid {
			return true
		}
		r.mu.Lock()
		owner, adopted := r.adopted[p.id]
		r.mu.Unlock()
		if adopted && owner == token {
			return true
		}
		if !p.zombie {
			// An empty environment may be one being replaced: between the
			// new program's memory and its environment, an exec shows
			// none. A step's shell being started is asked about once its
			// start has ended; any other such child makes the pass, which
			// reads it again later.
			tok, ok := readStepToken(pid)
			if !ok {
				r.waitStarts()
				if q, alive := readProc(pid); !alive || q.id != p.id || q.ppid != r.self || r.isShell(pid) {
					continue // reaped since, or a step's shell
				}
				tok, ok = readStepToken(pid)
			}
			if !ok || tok == token {
				return true
			}
		}
	}
	return false
}

// notShells reads the main thread's children twice and returns those
// that are not running steps' shells (only those among only, when only is
// not nil). Two reads: the kernel builds the list a child at a time and may
// skip one when another is reaped in between (get_children_pid,
// fs/proc/array.c), which two reads together do not.
func (r *reaper) notShells(buf []byte, only []int) (unknown []int, ok bool) {
	for range 2 {
		pids, ok := readChildren(r.childrenFd, buf)
		if !ok {
			return nil, false
		}
		r.mu.Lock()
		for _, pid := range pids {
			if r.shells[pid] == 0 && !slices.Contains(unknown, pid) && (only == nil || slices.Contains(only, pid)) {
				unknown = append(unknown, pid)
			}
		}
		r.mu.Unlock()
	}
	return unknown, true
}

// childrenBufSize holds the children file of a main thread with some
// hundred children without growing.
const childrenBufSize = 4096

// openChildren opens a children file and checks that it reads.
func openChildren(path string) (int, bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for errors.Is(err, syscall.EINTR) {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, false
	}
	if _, ok := readChildren(fd, nil); !ok {
		_ = syscall.Close(fd)
		return -1, false
	}
	return fd, true
}

// readChildren reads the open children file fd (pids separated by
// spaces) from its start, appending to buf, and returns the pids. Reads
// at an offset (pread) need no open and close each time, and goroutines
// reading at once do not move each other's offset.
func readChildren(fd int, buf []byte) ([]int, bool) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, false
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	var pids []int
	for _, f := range bytes.Fields(buf) {
		pid, ok := atoi(f)
		if !ok {
			return nil, false
		}
		pids = append(pids, pid)
	}
	return pids, true
}

// collectShared kills the live processes of the step with token and
// process group pgid among this process's children, reaps its dead ones,
// adopts the descendants of those it kills for the step, and returns how
// many of the step's processes are still there. The group's members were
// sent SIGKILL with the group; they are the step's whatever their
// environment says.
//
// It works from a pass over /proc that starts after the call, shared with
// the other steps that ask meanwhile: reading /proc costs a few system calls per process on the
// machine, and steps that end together need it once, not once each. A
// process the step leaves is this process's child by the time its shell
// has exited (the kernel reparents at exit), so any pass that starts after
// that sees it.
func (r *reaper) collectShared(token string, pgid int, killed map[procID]bool) int {
	req := &collectReq{token: token, pgid: pgid, killed: killed, done: make(chan struct{})}
	r.passMu.Lock()
	r.pend = append(r.pend, req)
	lead := !r.passing
	r.passing = true
	r.passMu.Unlock()
	if lead {
		r.passes()
	}
	<-req.done
	return req.left
}

// passes runs a collect pass for the requests pending now, then hands the
// requests that came in during it to a pass of their own (which starts
// after they asked), until none is left.
func (r *reaper) passes() {
	r.passMu.Lock()
	batch := r.pend
	r.pend = nil
	r.passMu.Unlock()

	r.collects.Add(1)
	procs, children, unlock := r.lockChildren()
	for _, q := range batch {
		q.left = r.collectLocked(procs, children, q.token, q.pgid, q.killed)
	}
	unlock()
	for _, q := range batch {
		close(q.done)
	}

	r.passMu.Lock()
	defer r.passMu.Unlock()
	if len(r.pend) == 0 {
		r.passing = false
		return
	}
	go r.passes()
}

// collectLocked is collectShared's work for one step on a snapshot of
// /proc, with the locks of lockChildren held.
func (r *reaper) collectLocked(procs []proc, children []child, token string, pgid int, killed map[procID]bool) int {
	left := 0
	for _, c := range children {
		owner, adopted := r.adopted[c.id]
		mine := c.token == token || adopted && owner == token || c.pgrp == pgid
		if !mine && r.mode == ReapAll && !r.active[c.token] && !(adopted && r.active[owner]) {
			mine = true // an orphan no running step owns
		}
		if !mine {
			continue
		}
		if c.zombie {
			if reapPid(c.id.pid) {
				delete(r.adopted, c.id)
				continue
			}
			left++
			continue
		}
		r.adopted[c.id] = token
		// Its descendants come to this process when it dies: they are the
		// step's too, whatever their environment says.
		for _, d := range descendants(procs, c.id.pid) {
			if _, ok := r.adopted[d]; !ok {
				r.adopted[d] = token
			}
		}
		if c.pgrp != pgid {
			killed[c.id] = true // the group was killed with the step
		}
		_ = syscall.Kill(c.id.pid, syscall.SIGKILL)
		left++
	}
	return left
}

// sweep reaps dead orphans and kills leftovers of ended steps.
func (r *reaper) sweep() {
	if r.quiet() {
		return
	}
	procs, children, unlock := r.lockChildren()
	defer unlock()
	r.swept = time.Now()
	r.sweepPasses.Add(1)
	seen := make(map[procID]bool, len(children))
	for _, c := range children {
		seen[c.id] = true
		owner, adopted := r.adopted[c.id]
		if c.zombie {
			if adopted || r.mode == ReapAll {
				if reapPid(c.id.pid) {
					delete(r.adopted, c.id)
				}
			}
			continue
		}
		switch {
		case c.token != "" && !r.active[c.token]:
			// A step's process whose step has ended: its cleanup gave up on
			// it (it was not dead by the deadline) or it was not yet ours.
			r.adopted[c.id] = c.token
			_ = syscall.Kill(c.id.pid, syscall.SIGKILL)
		case c.token != "":
			r.adopted[c.id] = c.token
		case adopted && owner != "" && !r.active[owner]:
			_ = syscall.Kill(c.id.pid, syscall.SIGKILL)
		}
	}
	live := make(map[procID]bool, len(procs))
	for _, p := range procs {
		live[p.id] = true
	}
	for id := range r.adopted {
		if !seen[id] && !live[id] {
			delete(r.adopted, id)
		}
	}
}

// quiet reports that a sweep has nothing to do: its work is on the
// orphans of steps, which are the main thread's children (see
// leftNothing), on the ones it has adopted, and with ReapAll on every dead
// child, which a wait that reaps nothing finds whatever thread started it.
//
// That wait names one dead child. When it is a running step's shell (each
// one is dead for a moment before its Run reaps it, and sends the SIGCHLD
// that wakes the sweep), the orphans are still all in the main thread's
// children, but a dead child another thread started could be behind it:
// the pass that would reap that one runs at most every hiddenGap, not on
// every step's exit.
func (r *reaper) quiet() bool {
	r.mu.Lock()
	all, adopted := r.mode == ReapAll, len(r.adopted)
	r.mu.Unlock()
	if adopted > 0 {
		return false
	}
	if all {
		switch other, shell := r.deadChildren(); {
		case other:
			return false
		case shell && r.claimHiddenPass():
			return false
		}
	}
	return r.leftNothing("", 0)
}

// deadChildren tells what the dead child that a wait names is: a running
// step's shell, or another (other). A pid not known as a shell may be one
// whose start is not yet recorded (asked again once the starts under way
// have ended) or one that its Run has reaped and forgotten since the wait
// named it (then the wait is asked again).
func (r *reaper) deadChildren() (other, shell bool) {
	for range maxLooks {
		pid, dead := deadChild()
		switch {
		case !dead:
			return false, false
		case pid <= 0:
			return true, false
		case r.isShell(pid):
			return false, true
		}
		r.waitStarts()
		switch {
		case r.isShell(pid):
			return false, true
		case stillDead(pid):
			return true, false
		}
	}
	return true, false
}

// maxLooks bounds deadChildren's waits: each one after the first found a
// shell reaped by its Run in between.
const maxLooks = 8

// claimHiddenPass reports whether a sweep that sees only a step's shell
// dead makes the pass anyway (the last pass began hiddenGap ago or more),
// and if so marks it begun, so that sweeps running at once make it once.
func (r *reaper) claimHiddenPass() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.swept) < hiddenGap {
		return false
	}
	r.swept = now
	return true
}

// hiddenGap is how often, at most, a ReapAll sweep makes a pass over /proc
// only because a dead step's shell hides the other dead children from the
// wait that names one (see quiet): a dead child that is neither a step's
// shell nor an orphan (one the program started and has not waited for)
// stays a zombie up to about this much longer. A pass reads every
// process's stat file: on a busy machine with hundreds of processes, some
// milliseconds of CPU; at one a second it was still 8 % of an agent's CPU
// in a bench-shell profile at load average 40.
const hiddenGap = 10 * time.Second

// isShell reports whether pid is a running step's shell.
func (r *reaper) isShell(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shells[pid] > 0
}

// deadChild returns a child of this process, of any of its threads, that
// has exited and is not reaped yet; dead is false when there is none, and
// pid is 0 when dead is true but the child cannot be told. It reaps
// nothing (WNOWAIT).
func deadChild() (pid int, dead bool) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			return 0, false // no child at all
		case err != nil:
			return 0, true
		}
		if info.Signo == 0 {
			return 0, false // none waitable (kernel_waitid)
		}
		return siginfoPid(&info), true
	}
}

// stillDead reports whether pid is a child of this process that has
// exited and is not reaped yet. It reaps nothing (WNOWAIT).
func stillDead(pid int) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return err == nil && info.Signo != 0
	}
}

// siginfoPid is si_pid of a siginfo_t that waitid filled: it follows
// si_signo, si_errno and si_code, and on 64-bit systems the padding that
// aligns the union holding it (__ARCH_SI_PREAMBLE_SIZE).
func siginfoPid(info *unix.Siginfo) int {
	off := 3 * unsafe.Sizeof(int32(0))
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 4 * unsafe.Sizeof(int32(0))
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// lockChildren reads /proc, then stops steps from starting and returns
// every process and this process's children with r.mu held; unlock
// releases both. Steps start while /proc is read: children checks each
// child again once they cannot.
func (r *reaper) lockChildren() (procs []proc, children []child, unlock func()) {
	r.scan.Lock()
	procs = readProcs()
	r.starting.Lock()
	children = r.children(procs)
	r.mu.Lock()
	return procs, children, func() {
		r.mu.Unlock()
		r.starting.Unlock()
		r.scan.Unlock()
	}
}

// children returns this process's children, but for running steps' shells.
func (r *reaper) children(procs []proc) []child {
	r.mu.Lock()
	shells := make(map[int]bool, len(r.shells))
	for pid := range r.shells {
		shells[pid] = true
	}
	r.mu.Unlock()
	var out []child
	for _, p := range procs {
		if p.ppid != r.self || shells[p.id.pid] {
			continue
		}
		// Read again now that no step starts: a shell that ended and was
		// reaped since /proc was read is gone or another process (its pid
		// reused), not a child to act on; a child may have died since.
		cur, ok := readProc(p.id.pid)
		if !ok || cur.id != p.id || cur.ppid != r.self {
			continue
		}
		p = cur
		c := child{id: p.id, pgrp: p.pgrp, zombie: p.zombie}
		if !p.zombie {
			c.token = stepToken(p.id.pid)
		}
		out = append(out, c)
	}
	return out
}

// reapPid reaps the dead child pid; false if it is not dead yet or not a
// child.
func reapPid(pid int) bool {
	var ws syscall.WaitStatus
	for {
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return got == pid || errors.Is(err, syscall.ECHILD)
	}
}

// readProcs lists the processes of /proc (thread-group leaders). It runs
// once per step that ends (shared by steps ending together), so it reads
// each /proc/<pid>/stat with plain system calls into one buffer: an
// os.File would add a poller registration, two fcntl calls and a
// finalizer per process.
func readProcs() []proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	out := make([]proc, 0, len(names))
	buf := make([]byte, statBufSize)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, ok := readProcInto(pid, "/proc/"+name+"/stat", buf); ok {
			out = append(out, p)
		}
	}
	return out
}

// statBufSize holds the fields of /proc/<pid>/stat that readProc parses
// (the first 22 of 52, a command name of at most 64 bytes).
const statBufSize = 1024

// readProc parses /proc/pid/stat.
func readProc(pid int) (proc, bool) {
	return readProcInto(pid, "/proc/"+strconv.Itoa(pid)+"/stat", make([]byte, statBufSize))
}

// readProcInto parses the stat file of pid at path, read into buf.
func readProcInto(pid int, path string, buf []byte) (proc, bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for errors.Is(err, syscall.EINTR) {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return proc{}, false
	}
	n, err := syscall.Read(fd, buf)
	for errors.Is(err, syscall.EINTR) {
		n, err = syscall.Read(fd, buf)
	}
	_ = syscall.Close(fd)
	if err != nil || n <= 0 {
		return proc{}, false
	}
	return parseStat(pid, buf[:n])
}

// parseStat parses the fields readProc needs from a stat file's content b.
func parseStat(pid int, b []byte) (proc, bool) {
	i := bytes.LastIndexByte(b, ')') // the command name may hold anything
	if i < 0 {
		return proc{}, false
	}
	// Fields after the name: state ppid pgrp session tty tpgid flags ...
	// starttime (the 20th).
	var f [20][]byte
	n := 0
	for rest := b[i+1:]; n < len(f); n++ {
		rest = bytes.TrimLeft(rest, " \n")
		if len(rest) == 0 {
			break
		}
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		f[n], rest = rest[:j], rest[j:]
	}
	if n < len(f) {
		return proc{}, false
	}
	ppid, ok1 := atoi(f[1])
	pgrp, ok2 := atoi(f[2])
	start, ok3 := atou(f[19])
	if !ok1 || !ok2 || !ok3 {
		return proc{}, false
	}
	return proc{id: procID{pid: pid, start: start}, ppid: ppid, pgrp: pgrp, zombie: len(f[0]) == 1 && (f[0][0] == 'Z' || f[0][0] == 'X')}, true
}

// atou parses a decimal without allocating.
func atou(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// atoi parses a decimal that may be negative (a tty's tpgid is -1).
func atoi(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	v, ok := atou(b)
	if !ok || v > 1<<62 {
		return 0, false
	}
	if neg {
		return -int(v), true
	}
	return int(v), true
}

// stepToken reads EnvStepToken from the environment pid was started with.
func stepToken(pid int) string {
	tok, _ := readStepToken(pid)
	return tok
}

// readStepToken is stepToken; ok is false when the environment could not
// be read or was empty.
func readStepToken(pid int) (token string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || len(b) == 0 {
		return "", false
	}
	prefix := []byte(EnvStepToken + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v), true
		}
	}
	return "", true
}

// descendants returns the processes below pid.
func descendants(procs []proc, pid int) []procID {
	kids := map[int][]proc{}
	for _, p := range procs {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	var out []procID
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, k := range kids[next] {
			out = append(out, k.id)
			queue = append(queue, k.id.pid)
		}
	}
	return out
}

// Output runs cmd and returns its standard output, as cmd.Output does but
// without the standard error in an *exec.ExitError. A subreaper with
// ReapAll reaps every dead child it does not know: Output makes cmd's
// process known to it, as a step's shell is, from before its start until
// cmd.Wait has reaped it, so that its exit status is never stolen (the
// wait would fail with ECHILD). For child processes of the program other
// than steps, such as the git commands of commit_required.
func Output(cmd *exec.Cmd) ([]byte, error) {
	r := currentReaper()
	if r == nil {
		return cmd.Output()
	}
	if cmd.Stdout != nil {
		return nil, errors.New("shell: Output: Stdout already set")
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	starting := r.startBegins()
	err := cmd.Start()
	if err == nil {
		r.started(cmd.Process.Pid)
	}
	r.startEnds(starting)
	if err != nil {
		return nil, err
	}
	outputStarted(cmd.Process.Pid)
	err = cmd.Wait()
	r.endStep("", cmd.Process.Pid)
	return out.Bytes(), err
}

// outputStarted is called by Output between the start and the wait (tests
// sweep there).
var outputStarted = func(pid int) {}
