package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// progress renders a job's progress: redrawn in place on a terminal, one
// line per second elsewhere (logs, CI).
type progress struct {
	w        io.Writer
	tty      bool
	start    time.Time
	last     time.Time
	lastDone int64
	width    int
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), start: time.Now(), width: 30}
}

func (p *progress) update(st *messages.JobStatus) {
	now := time.Now()
	done := st.Done()
	if !p.tty && done == p.lastDone && now.Sub(p.last) < 5*time.Second {
		return
	}
	if !p.tty && now.Sub(p.last) < time.Second && !messages.TerminalState(st.State) {
		return
	}
	p.last, p.lastDone = now, done
	line := p.line(st, now)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) line(st *messages.JobStatus, now time.Time) string {
	done, total := st.Done(), st.Items
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	filled := int(frac * float64(p.width))
	bar := strings.Repeat("█", filled) + strings.Repeat("░", p.width-filled)
	rate := 0.0
	if el := now.Sub(p.start).Seconds(); el > 0 {
		rate = float64(done) / el
	}
	return fmt.Sprintf("%s %s %3.0f%% %d/%d  ok %d  dlq %d  failed %d  retries %d  %.0f items/s",
		st.State, bar, frac*100, done, total, st.Succeeded, st.DeadLettered, st.Failed, st.Retries, rate)
}
