package itemrun

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// compileExitHandlers compiles a step's on_exit_code handlers (shell or
// claude commands, in the step's working_dir); nil when it has none.
func compileExitHandlers(id, field string, st *messages.Step) (map[int]command, error) {
	if len(st.OnExitCode) == 0 {
		return nil, nil
	}
	out := make(map[int]command, len(st.OnExitCode))
	for k, h := range st.OnExitCode {
		code, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: %s.%s: not an exit code", id, field, k)
		}
		text := h.Shell
		if h.Claude != "" {
			text = h.Claude
		}
		t, err := wire.ParseTemplate(text)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: %s.%s: %w", id, field, k, err)
		}
		c := compileCommand(t)
		if h.Claude != "" {
			c = command{claude: &t}
		}
		c.workingDir = st.WorkingDir
		out[code] = c
	}
	return out, nil
}

// onExitCode runs step i's on_exit_code handler for the exit code of its
// run (0 when it succeeded, f nil; none when it did not exit on its own or
// failed after its command, in its capture or on_success), as Prodigy runs
// it after the step's other handlers. ${shell.output} is the step's output
// (a failed run's stdout then stderr). The step's outcome stays its own,
// except that a handler that fails fails a step that succeeded.
func (a *Agent) onExitCode(ctx context.Context, it *item, i int, out string, f *retry.Failure, attempt int) *retry.Failure {
	handlers := it.set.onExit[i]
	if len(handlers) == 0 {
		return f
	}
	code := 0
	if f != nil {
		if f.ExitCode == nil {
			return f
		}
		code = *f.ExitCode
		out = strings.TrimRight(it.ran.stdout, "\n")
		if it.ran.stderr != "" {
			out = strings.TrimRight(out+"\n"+it.ran.stderr, "\n")
		}
	}
	c, ok := handlers[code]
	if !ok {
		return f
	}
	ran := it.ran // the step's run, which its fallback reads
	it.justRan = &out
	defer func() { it.ran, it.justRan = ran, nil }()
	timeout := it.deadline.Bound(a.cfg.hooks.Clock.Now(), a.stepTimeout(it.set.steps[i].Timeout.D()))
	_, hf := a.runShell(ctx, it, c, timeout, attempt)
	switch {
	case hf == nil:
		return f
	case f == nil:
		hf.Message = fmt.Sprintf("on_exit_code %d: %s", code, hf.Message)
		if hf.Err != nil {
			hf.Err = fmt.Errorf("on_exit_code %d: %w", code, hf.Err)
		}
		return hf
	}
	f.Message += fmt.Sprintf("; on_exit_code %d failed too: %s", code, hf.Error())
	return f
}

// runHandlers runs a fallback: one command, or (seq) its commands in turn,
// in the step's working_dir, stopping at the first that fails, each
// reading the failed run's output as ${shell.output}; the output is the
// last one's.
func (a *Agent) runHandlers(ctx context.Context, it *item, c command, timeout time.Duration, attempt int) (string, *retry.Failure) {
	if c.seq == nil {
		return a.runShell(ctx, it, c, timeout, attempt)
	}
	var out string
	for j, h := range c.seq.commands {
		h.workingDir = cmp.Or(h.workingDir, c.workingDir)
		var f *retry.Failure
		if out, f = a.runShell(ctx, it, h, timeout, attempt); f != nil {
			f.Message = fmt.Sprintf("handler command %d: %s", j+1, f.Message)
			if f.Err != nil {
				f.Err = fmt.Errorf("handler command %d: %w", j+1, f.Err)
			}
			return "", f
		}
	}
	return out, nil
}
