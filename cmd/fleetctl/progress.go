package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// progressWidth is the length of a progress bar.
const progressWidth = 30

// liveLine shows a line that keeps changing: redrawn in place on a
// terminal, printed as a new line elsewhere (logs, CI), where its owner
// prints it more rarely.
type liveLine struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time // of the last line drawn
	drawn bool
}

func newLiveLine(w io.Writer) liveLine {
	return liveLine{w: w, tty: isTerminal(w), start: time.Now()}
}

// draw shows line, drawn at now.
func (l *liveLine) draw(line string, now time.Time) {
	l.last = now
	if l.tty {
		fmt.Fprintf(l.w, "\r\033[K%s", line)
		l.drawn = true
	} else {
		fmt.Fprintln(l.w, line)
	}
}

// finish ends the line on a terminal.
func (l *liveLine) finish() {
	if l.tty && l.drawn {
		fmt.Fprintln(l.w)
	}
}

// rate is n per second since the start.
func (l *liveLine) rate(n int64, now time.Time) float64 {
	if el := now.Sub(l.start).Seconds(); el > 0 {
		return float64(n) / el
	}
	return 0
}

// progressBar is done of total as a bar and a percentage; done of nothing
// is complete.
func progressBar(done, total int64) string {
	frac := 1.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	filled := int(frac * progressWidth)
	return fmt.Sprintf("%s %3.0f%%", strings.Repeat("█", filled)+strings.Repeat("░", progressWidth-filled), frac*100)
}

// progress renders a job's progress: redrawn in place on a terminal, one
// line per second elsewhere while items finish, every 5 seconds while
// none do.
type progress struct {
	liveLine
	lastDone int64
}

func newProgress(w io.Writer) *progress { return &progress{liveLine: newLiveLine(w)} }

func (p *progress) update(st *messages.JobStatus) {
	now := time.Now()
	done := st.Done()
	if !p.tty && done == p.lastDone && now.Sub(p.last) < 5*time.Second {
		return
	}
	if !p.tty && now.Sub(p.last) < time.Second && !messages.TerminalState(st.State) {
		return
	}
	p.lastDone = done
	p.draw(p.line(st, now), now)
}

func (p *progress) line(st *messages.JobStatus, now time.Time) string {
	done, total := st.Done(), st.Items
	return fmt.Sprintf("%s %s %d/%d  ok %d  dlq %d  failed %d  retries %d  %.0f items/s",
		st.State, progressBar(done, total), done, total, st.Succeeded, st.DeadLettered, st.Failed, st.Retries, p.rate(done, now))
}

// replayProgress draws a replay's progress like the job progress bar.
type replayProgress struct{ liveLine }

func newReplayProgress(w io.Writer) *replayProgress { return &replayProgress{newLiveLine(w)} }

func (p *replayProgress) update(st *messages.DLQReplayStatus) {
	now := time.Now()
	if !p.tty && now.Sub(p.last) < time.Second && st.State == messages.ReplayRunning {
		return
	}
	done := st.Replayed + st.Failed + st.Skipped
	p.draw(fmt.Sprintf("replay %s %d/%d  failed %d  %.1f items/s", progressBar(done, st.Matched),
		st.Replayed, st.Matched, st.Failed, p.rate(st.Replayed, now)), now)
}
