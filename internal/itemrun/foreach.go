package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/foreach"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/stepkind"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// foreachCmd is a compiled foreach step (docs/job-spec.md): the command
// listing its elements (none for a list), and its body.
type foreachCmd struct {
	spec *messages.Foreach
	list command
	body *stepSet
}

func compileForeach(id, field string, fe *messages.Foreach) (*foreachCmd, error) {
	body, err := compileSteps(id, field+".do", fe.Do)
	if err != nil {
		return nil, err
	}
	c := &foreachCmd{spec: fe, body: body}
	if fe.Command != "" {
		t, err := wire.ParseTemplate(fe.Command)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: %s.command: %w", id, field, err)
		}
		c.list = compileCommand(t)
		c.list.capture = true // its whole output, up to the capture bound, is read
	}
	return c, nil
}

// runForeach runs a foreach step for the item: its elements (the list, or
// the command's non-empty output lines, run in the item's directory), then
// for each element the body's steps in order, once each, in the item's
// directory, where ${item} is the element, ${index} its position and
// ${total} the number of elements. timeout bounds the whole step. The step
// fails at the first element that fails; with continue_on_error every
// element runs and the step succeeds, as Prodigy's does. Its output is
// one line per element that ran, failed ones with their error.
func (a *Agent) runForeach(ctx context.Context, it *item, c *foreachCmd, timeout time.Duration, attempt int) (string, *retry.Failure) {
	ctx, cancel := context.WithTimeout(ctx, a.stepTimeout(timeout))
	defer cancel()
	if _, err := a.stepDir(it, ""); err != nil { // made once, shared by the elements
		return "", &retry.Failure{Err: fmt.Errorf("the item's directory: %w", err)}
	}
	elems := c.spec.Items
	if c.spec.Command != "" {
		out, f := a.runShell(ctx, it, c.list, timeout, attempt)
		if f != nil {
			f.Message = "foreach command: " + f.Message
			if f.Err != nil {
				f.Err = fmt.Errorf("foreach command: %w", f.Err)
			}
			return "", f
		}
		if it.ran.stdoutBytes > wire.MaxCaptureBytes {
			return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("foreach command: its output is %d bytes, over the bound of %d bytes", it.ran.stdoutBytes, wire.MaxCaptureBytes))}
		}
		elems = foreach.Lines(out)
	}
	elems, err := foreach.Select(elems, c.spec.MaxItems, stepkind.MaxItems)
	if err != nil {
		return "", &retry.Failure{Err: retry.Permanent(fmt.Errorf("foreach: %w", err))}
	}
	outs := make([]string, len(elems))
	total := &wire.Capture{Value: json.RawMessage(strconv.Itoa(len(elems)))}
	failures, ran := foreach.Run(ctx, len(elems), c.spec.Parallel, c.spec.ContinueOnError, func(ctx context.Context, i int) error {
		var err error
		outs[i], err = a.runElement(ctx, it, c.body, elems[i], i, total, attempt)
		return err
	})
	failed := make(map[int]error, len(failures))
	var errs []error
	for _, fl := range failures {
		failed[fl.Index] = fl.Err
		errs = append(errs, fmt.Errorf("element %d (%s): %w", fl.Index, elems[fl.Index], fl.Err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "foreach: %d elements, %d ran, %d failed\n", len(elems), ran, len(failures))
	for i := range ran {
		if err := failed[i]; err != nil {
			fmt.Fprintf(&b, "[%d] %s: failed: %v\n", i, elems[i], err)
		} else {
			fmt.Fprintf(&b, "[%d] %s: %s\n", i, elems[i], strings.TrimRight(outs[i], "\n"))
		}
	}
	if ran == len(elems) && (len(failures) == 0 || c.spec.ContinueOnError) {
		return b.String(), nil // with continue_on_error, failed elements are in the output, as Prodigy counts them
	}
	if ran < len(elems) && len(failures) == 0 {
		errs = append(errs, fmt.Errorf("%d of %d elements ran: %w", ran, len(elems), context.Cause(ctx)))
	}
	return "", &retry.Failure{Message: "foreach: " + errors.Join(errs...).Error(), Err: errors.Join(errs...)}
}

// runElement runs the body's steps for element elem (position i) on a
// copy of the item whose ${item} is the element; it returns the last
// step's output.
func (a *Agent) runElement(ctx context.Context, it *item, body *stepSet, elem string, i int, total *wire.Capture, attempt int) (string, error) {
	sub := *it
	sub.wi.Payload, _ = json.Marshal(elem)
	caps := maps.Clone(itemCaptures(it))
	if caps == nil {
		caps = map[string]*wire.Capture{}
	}
	caps["index"] = &wire.Capture{Value: json.RawMessage(strconv.Itoa(i))}
	caps["total"] = total
	sub.st.Captures = caps
	sub.justRan = nil
	out := ""
	for j := range body.steps {
		if j > 0 {
			prev := out
			sub.justRan = &prev // ${shell.output}: the element's previous step's output
		}
		timeout := sub.deadline.Bound(a.cfg.hooks.Clock.Now(), a.stepTimeout(body.steps[j].Timeout.D()))
		var f *retry.Failure
		switch c := body.commands[j]; {
		case c.write != nil:
			out, f = a.runWrite(&sub, c.write, attempt)
		default:
			out, f = a.runShell(ctx, &sub, c, timeout, attempt)
		}
		if f != nil {
			return out, fmt.Errorf("%s: %w", body.stepName(j), f.Error())
		}
	}
	return out, nil
}
