package itemrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// shellRan is what a shell step's run leaves besides its output.
type shellRan struct {
	stdout      string // the tail of stdout, kept for a failed run's fallback
	stderr      string
	exitCode    int
	stdoutBytes int64
}

// capture stores what step i captures (capture:) from its successful run
// in the item's state, where a retry of a later step, on this agent or
// another, finds it. A value that does not read in its format, or that
// would take the item's captures over wire.MaxCaptureBytes, fails the
// step for good: no value is cut short.
func (a *Agent) capture(it *item, i int, out string, dur time.Duration) *retry.Failure {
	st := &it.set.steps[i]
	if st.Capture == "" || wire.IsOutputCapture(st.Capture) {
		return nil
	}
	fail := func(format string, args ...any) *retry.Failure {
		return &retry.Failure{Err: retry.Permanent(fmt.Errorf("capture %s: "+format, append([]any{st.Capture}, args...)...))}
	}
	if it.ran.stdoutBytes > int64(len(out)) && it.ran.stdoutBytes > wire.MaxCaptureBytes {
		return fail("the output is %d bytes, over the bound of %d bytes on an item's captures", it.ran.stdoutBytes, wire.MaxCaptureBytes)
	}
	c := &wire.Capture{}
	s := st.CaptureStreams
	if s == nil || s.Stdout == nil || *s.Stdout {
		v, err := wire.CaptureValue(st.CaptureFormat, out, true)
		if err != nil {
			return fail("%v", err)
		}
		c.Value = v
	}
	if s != nil {
		if s.Stderr {
			c.Stderr = &it.ran.stderr
		}
		if s.ExitCode {
			code := it.ran.exitCode
			c.ExitCode = &code
		}
		if s.Success {
			ok := true
			c.Success = &ok
		}
		if s.Duration {
			d := dur.Seconds()
			c.Duration = &d
		}
	}
	total := c.Size()
	for name, other := range it.st.Captures {
		if name != st.Capture {
			total += other.Size()
		}
	}
	if total > wire.MaxCaptureBytes {
		return fail("the item's captures would be %d bytes, over the bound of %d bytes", total, wire.MaxCaptureBytes)
	}
	if it.st.Captures == nil {
		it.st.Captures = map[string]*wire.Capture{}
	}
	it.st.Captures[st.Capture] = c
	return nil
}

// skipped reports whether step i's condition (when:) is false for the
// item, with the output that says so.
func (a *Agent) skipped(it *item, i int) (bool, string) {
	cond := it.set.when[i]
	if cond == nil || cond.Eval(a.condVars(it)) {
		return false, ""
	}
	return true, "skipped: when: " + cond.String() + " is false"
}

// condVars resolves a condition's paths: item.<field>, item_index,
// attempt, shell.output and last.output, and the captured variables (a
// captured stream by its name, anything else a path into the value): the
// item's, then its job's setup's.
func (a *Agent) condVars(it *item) expr.Lookup {
	var item any
	decoded := false
	return func(p expr.Path) (any, bool) {
		if len(p) == 0 {
			return nil, false
		}
		name := p[0].Field
		switch name {
		case wire.RefItem:
			if !decoded {
				d := json.NewDecoder(bytes.NewReader(it.wi.Payload))
				d.UseNumber()
				_ = d.Decode(&item)
				decoded = true
			}
			return expr.Get(item, p[1:])
		case wire.RefItemIndex:
			return json.Number(fmt.Sprint(it.wi.Index)), len(p) == 1
		case wire.RefItemTotal:
			return json.Number(fmt.Sprint(it.job.items)), len(p) == 1
		case wire.RefAttempt:
			return json.Number(fmt.Sprint(it.st.StepAttempt + 1)), len(p) == 1
		case wire.RefShell, wire.RefLast:
			n := len(it.st.Outputs)
			if n == 0 || len(p) != 2 || p[1].Field != "output" {
				return nil, false
			}
			return strings.TrimRight(it.st.Outputs[n-1], "\n"), true
		}
		c := it.st.Captures[name]
		if c == nil && it.wi.Phase != messages.PhaseSetup {
			c = it.job.setupCaptures[name] // the setup's (itemCaptures)
		}
		if c == nil {
			return nil, false
		}
		if len(p) == 2 {
			switch p[1].Field {
			case "stderr":
				if c.Stderr != nil {
					return *c.Stderr, true
				}
			case "exit_code":
				if c.ExitCode != nil {
					return json.Number(fmt.Sprint(*c.ExitCode)), true
				}
			case "success":
				if c.Success != nil {
					return *c.Success, true
				}
			case "duration":
				if c.Duration != nil {
					return json.Number(fmt.Sprint(*c.Duration)), true
				}
			}
		}
		v := c.JSONValue()
		if _, isObj := v.(map[string]any); !isObj && len(p) == 2 && p[1].Field == "output" {
			return v, c.Value != nil // ${NAME.output}: the value (Prodigy's step id)
		}
		return expr.Get(v, p[1:])
	}
}

// onSuccess runs step i's on_success command after the step succeeded,
// with the step's output as ${shell.output}. Its failure is the step's.
func (a *Agent) onSuccess(ctx context.Context, it *item, i int, out string, attempt int) *retry.Failure {
	c := it.set.onSuccess[i]
	if c == nil {
		return nil
	}
	it.justRan = &out
	defer func() { it.justRan = nil }()
	timeout := it.deadline.Bound(a.cfg.hooks.Clock.Now(), a.stepTimeout(it.set.steps[i].Timeout.D()))
	if _, f := a.runShell(ctx, it, *c, timeout, attempt); f != nil {
		f.Message = "on_success: " + f.Message
		if f.Err != nil {
			f.Err = fmt.Errorf("on_success: %w", f.Err)
		}
		return f
	}
	return nil
}
