package jobrun

import (
	"errors"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// phase is where a job's runner is in the job's life (docs/jobs.md, "The
// runner's phases"). Only lifecycle.fire changes it, following transitions.
type phase uint8

const (
	// phaseReplaying: the runner reads the job's results from the start to
	// rebuild its counts; nothing is decided and no event is emitted for
	// what it reads. Every runner starts here.
	phaseReplaying phase = iota
	// phaseMapping: items are published and their results counted; the
	// error policy, best effort and the deadline apply.
	phaseMapping
	// phaseReducing: the map phase ended; the reduce item runs.
	phaseReducing
	// phaseLingering: the job finished; its runner still counts late
	// results for LateResultWindow, so that a DLQ replay can reopen it.
	phaseLingering
	// phaseExited: the runner returned (the window passed unheld, or the
	// coordinator stopped). A new runner takes over a reopened job.
	phaseExited
)

var phaseNames = [...]string{"replaying", "mapping", "reducing", "lingering", "exited"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// trigger is what moves a runner from one phase to another.
type trigger uint8

const (
	// caughtUp: the results replay reached the end seen at the start, and
	// the record's phase is map.
	caughtUp trigger = iota
	// caughtUpReducing: the same, for a record whose map phase had ended
	// (a coordinator restarted while the job was reducing).
	caughtUpReducing
	// mapEndReduce: the map phase ended (a completion reason, a stop, an
	// input error) and the job has reduce steps.
	mapEndReduce
	// mapEndFinish: the map phase ended and the job finishes with it (no
	// reduce steps, or cancelled).
	mapEndFinish
	// reduceDone: the reduce item reported its outcome.
	reduceDone
	// reopened: a DLQ replay's reopen marker took an item of the ended
	// job back; the job runs until the item has its new outcome.
	reopened
	// lingerDone: a late-result window passed without a hold.
	lingerDone
	// shutdown: the coordinator stops (the job resumes at the next start),
	// or the runner cannot follow the job's results.
	shutdown
)

var triggerNames = [...]string{"caught_up", "caught_up_reducing", "map_end_reduce", "map_end_finish", "reduce_done", "reopened", "linger_done", "shutdown"}

func (t trigger) String() string {
	if int(t) < len(triggerNames) {
		return triggerNames[t]
	}
	return fmt.Sprintf("trigger(%d)", t)
}

// transitions is the runner's state machine: every legal transition, and
// only those. A pair that is not here is refused.
//
//	replaying ─caught_up──────────► mapping
//	replaying ─caught_up_reducing─► reducing
//	replaying ─map_end_reduce─────► reducing   (a cancel while replaying)
//	replaying ─map_end_finish─────► lingering  (a cancel while replaying)
//	replaying ─reduce_done────────► lingering  (the reduce outcome was stored)
//	mapping   ─map_end_reduce─────► reducing
//	mapping   ─map_end_finish─────► lingering
//	reducing  ─reduce_done────────► lingering
//	reducing  ─reopened───────────► mapping
//	lingering ─reopened───────────► mapping
//	lingering ─linger_done────────► exited
//	any but exited ─shutdown──────► exited
var transitions = map[phase]map[trigger]phase{
	phaseReplaying: {
		caughtUp: phaseMapping, caughtUpReducing: phaseReducing,
		mapEndReduce: phaseReducing, mapEndFinish: phaseLingering, reduceDone: phaseLingering,
		shutdown: phaseExited,
	},
	phaseMapping: {
		mapEndReduce: phaseReducing, mapEndFinish: phaseLingering,
		shutdown: phaseExited,
	},
	phaseReducing: {
		reduceDone: phaseLingering, reopened: phaseMapping,
		shutdown: phaseExited,
	},
	phaseLingering: {
		reopened: phaseMapping, lingerDone: phaseExited,
		shutdown: phaseExited,
	},
	phaseExited: {},
}

// errTransition is returned for a transition the state machine refuses.
var errTransition = errors.New("coordinator: illegal phase transition")

// lifecycle is a job runner's state machine: its phase, and the facts the
// run loop and the policies read with it. Not safe for concurrent use: the
// runner's lock guards it.
type lifecycle struct {
	phase phase
	// live: the results replay caught up, so results are new (events are
	// emitted for them). Set on leaving replaying, or, for a runner a
	// cancel moved on while it replayed, when the replay catches up.
	live bool
	// round counts reopens: a round has at most one map end and one finish
	// (mapEnded says whether its map phase has ended).
	round    int
	mapEnded bool
	// held: a DLQ replay is about to reopen the job; the next late-result
	// window that passes starts another instead of ending the runner.
	held bool
}

// fire moves the machine by t, or refuses (errTransition) and changes
// nothing. It is the only place the phase changes.
func (l *lifecycle) fire(t trigger) error {
	next, ok := transitions[l.phase][t]
	if !ok {
		return fmt.Errorf("%w: %s while %s", errTransition, t, l.phase)
	}
	switch t {
	case caughtUp:
		l.live = true
	case caughtUpReducing:
		l.live, l.mapEnded = true, true
	case mapEndReduce, mapEndFinish:
		l.mapEnded = true
	case reopened:
		l.round++
		l.mapEnded = false
	}
	l.phase = next
	return nil
}

// catchUp records that the results replay caught up. A replaying runner
// moves on to mapping, or to reducing when the record says the map phase
// had ended (reducing); a runner already moved on (a cancel during the
// replay) only becomes live.
func (l *lifecycle) catchUp(reducing bool) {
	if l.phase != phaseReplaying {
		l.live = true
		return
	}
	t := caughtUp
	if reducing {
		t = caughtUpReducing
	}
	_ = l.fire(t) // legal from replaying
}

// deciding reports whether results are new and the map phase runs: the
// error policy, best effort, completion and the deadline apply.
func (l *lifecycle) deciding() bool { return l.live && l.phase == phaseMapping }

// ended reports whether the map phase is over: a stop is refused, and the
// publisher stops.
func (l *lifecycle) ended() bool { return l.phase >= phaseReducing }

// hold keeps a lingering runner for one more window: a DLQ replay is
// about to reopen the job. It fails once the runner exits.
func (l *lifecycle) hold() bool {
	if l.phase == phaseExited {
		return false
	}
	l.held = true
	return true
}

// windowPassed decides at the end of a late-result window: a lingering
// runner exits (exit) unless it was held, and then waits once more
// (again). A runner reopened meanwhile does neither. Either way the hold
// is used up.
func (l *lifecycle) windowPassed() (exit, again bool) {
	held := l.held
	l.held = false
	switch {
	case l.phase != phaseLingering:
		return false, false
	case held:
		return false, true
	}
	_ = l.fire(lingerDone) // legal from lingering
	return true, false
}

// recordPhase is the record's phase (JobStatus.Phase) for p; "" where
// the runner's phase says nothing new (replaying: the record's is kept).
func recordPhase(p phase) string {
	switch p {
	case phaseMapping:
		return messages.PhaseMap
	case phaseReducing:
		return messages.PhaseReducing
	case phaseLingering:
		return messages.PhaseDone
	}
	return ""
}

// loopDue is what the run loop has done about the lifecycle, so that it
// does each thing once per round.
type loopDue struct {
	mapEnd, finish int // the round handled (-1: none)
}

func newLoopDue() loopDue { return loopDue{mapEnd: -1, finish: -1} }

// next says what the run loop owes l now, and records it as done: the
// map end's work (stop publishing, purge the queue, the map-end events,
// start the reduce) and the finish's (the JobCompleted event and the
// late-result window). Both come once per round; a reopen starts a new
// round, and what a round ended before the loop looked is not done.
func (d *loopDue) next(l lifecycle) (mapEnd, finish bool) {
	if l.mapEnded && d.mapEnd != l.round {
		d.mapEnd, mapEnd = l.round, true
	}
	if l.phase == phaseLingering && d.finish != l.round {
		d.finish, finish = l.round, true
	}
	return mapEnd, finish
}
