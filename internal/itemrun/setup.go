package itemrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The setup item (docs/job-spec.md, "The setup phase"): a job with
// Prodigy's setup steps or a map.input command has one item, published
// before any other, that runs them on an agent of the job's pool. When its
// steps succeed, the agent reads the file the job's input names (relative
// to the item's directory), or what the input command wrote, and carries
// its text back in the result (messages.SetupOutput); the coordinator
// stores it as the job's input and expands the items from it. The text
// must fit in a result message: setupItemsLimit says how much, and a
// larger input fails the setup with that bound in its error. The result
// also carries what the setup steps captured (capture:), which the
// coordinator keeps in the job's records: every map and reduce item
// starts with them (itemCaptures).

// inputCommandFile is where the input command's stdout goes, in the setup
// item's directory.
const inputCommandFile = ".jetfleet-input-command.out"

// inputCommandStep is the name of the step that runs the input command.
const inputCommandStep = "input_command"

// compileSetup compiles the steps of spec's setup item: its setup
// commands, then its input command (run once, as Prodigy runs it, with its
// stdout kept in inputCommandFile). It returns nil when the job has
// neither.
func compileSetup(id string, spec *messages.JobSpec) (*stepSet, error) {
	var steps []messages.Step
	if spec.Setup != nil {
		steps = append(steps, spec.Setup.Commands...)
	}
	if spec.InputCommand != "" {
		once := 1
		steps = append(steps, messages.Step{
			Name: inputCommandStep,
			// On lines of their own: the command may end in a comment.
			Shell:       "(\n" + spec.InputCommand + "\n) > " + inputCommandFile,
			RetryConfig: &messages.RetryConfig{Attempts: &once},
		})
	}
	if len(steps) == 0 {
		return nil, nil
	}
	return compileSteps(id, "setup.commands", steps)
}

// setupInput is the file whose text becomes the job's input once the
// setup item's steps succeed, or "" when the job's items are not the
// setup's (inline items, an uploaded input).
func setupInput(spec *messages.JobSpec) (path string, fromCommand bool) {
	switch {
	case spec.InputCommand != "":
		return inputCommandFile, true
	case spec.Setup != nil && spec.Input != "" && !strings.Contains(spec.Input, "://"):
		return spec.Input, false
	}
	return "", false
}

// setupItemsLimit is the most input text a setup result carries, encoded
// as a JSON string: what a result message leaves under the server's
// max_payload after its headers and wire.ItemHeadroom for its other
// fields.
func (a *Agent) setupItemsLimit() int { return a.maxPayload() - wire.ItemHeadroom }

// errSetupInput marks a setup whose input cannot be carried back.
var errSetupInput = errors.New("setup")

// setupOutput reads what a setup item that succeeded leaves for the
// coordinator: its captures, and the input it left. Both travel in one
// result message: the captures (at most wire.MaxCaptureBytes, which
// capture enforces as for any item) leave less room for the input.
func (a *Agent) setupOutput(it *item) (*messages.SetupOutput, error) {
	var out messages.SetupOutput
	if len(it.st.Captures) > 0 {
		enc, err := json.Marshal(it.st.Captures)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the captures: %w", errSetupInput, err)
		}
		if len(enc) > a.setupItemsLimit() {
			return nil, fmt.Errorf("%w: the setup's captures are %d bytes encoded, more than a result carries (%d bytes)", errSetupInput, len(enc), a.setupItemsLimit())
		}
		out.Captures = enc
	}
	name, fromCommand := setupInput(it.job.spec)
	if name == "" {
		if out.Captures == nil {
			return nil, nil
		}
		return &out, nil
	}
	dir := it.dir
	if dir == "" {
		dir = a.cfg.WorkDir
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	field := "input " + name
	if fromCommand {
		field = "the output of input_command"
	}
	limit := a.setupItemsLimit() - len(out.Captures)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: the setup steps succeeded but left no file at %s (map.input names it, relative to the setup's directory)", errSetupInput, name)
		}
		return nil, fmt.Errorf("%w: reading %s: %w", errSetupInput, field, err)
	}
	defer f.Close()
	// Read one byte past the bound: enough to tell that it is over.
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", errSetupInput, field, err)
	}
	text := buf.Bytes()
	if it.mask != nil { // the input travels to the coordinator: no secret in it
		text = []byte(it.mask.Mask(string(text)))
	}
	if fromCommand {
		js := it.job.spec.JSONPath
		text = commandItems(text, js == "" || js == messages.DefaultJSONPath)
	}
	enc, _ := json.Marshal(string(text))
	if buf.Len() > limit || len(enc) > limit {
		n := len(out.Captures)
		rest := fmt.Sprintf("%d for the rest of the result", int(a.maxPayloadOf())-limit-n)
		if n > 0 {
			rest += fmt.Sprintf(" and %d for the setup's captures", n)
		}
		return nil, fmt.Errorf("%w: %s is more than %d bytes (as a JSON string); the limit is %d (the server's max_payload %d less %s): have the setup write fewer or smaller items, or upload the input with fleetctl submit",
			errSetupInput, field, min(buf.Len(), len(enc)), limit, a.maxPayloadOf(), rest)
	}
	out.Items = string(text)
	return &out, nil
}

// commandItems turns an input command's stdout into the job's input as
// Prodigy reads it: JSON as it is (an array; a single value is one item,
// unless a json_path of the job's own reads it: wrap is false then), else
// one item per non-empty line, a line of JSON as that value and any other
// line as {"item": line}.
func commandItems(out []byte, wrap bool) []byte {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) > 0 && json.Valid(trimmed) {
		if trimmed[0] == '[' || !wrap {
			return trimmed
		}
		return append(append([]byte{'['}, trimmed...), ']')
	}
	var b bytes.Buffer
	b.WriteByte('[')
	n := 0
	for line := range bytes.Lines(out) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		if json.Valid(line) {
			b.Write(line)
			continue
		}
		item, _ := json.Marshal(map[string]string{"item": string(line)})
		b.Write(item)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// succeedSetup reports a setup item whose steps succeeded: with its
// output, or failed when that cannot be carried back (no file, too
// large), the reason in its error.
func (a *Agent) succeedSetup(ctx context.Context, it *item) {
	out, err := a.setupOutput(it)
	if err != nil {
		it.st.Final, it.st.Reason, it.st.Error, it.st.ErrorClass = messages.OutcomeFailed, messages.ReasonSetupInput, err.Error(), "error"
		a.finalize(ctx, it)
		return
	}
	res := a.result(it, messages.OutcomeSucceeded)
	if n := len(it.st.Outputs); n > 0 {
		res.Output = it.st.Outputs[n-1]
	}
	res.Setup = out
	a.report(it, res, false)
	// The job's spec record is rewritten with its items and budget when its
	// map phase starts: read it afresh for the map items.
	a.jobs.forget(it.wi.JobID)
}

// setupDeadline is the setup item's bound: setup.timeout, from the start
// of its first step.
func setupDeadline(it *item) retry.Deadline {
	var d messages.Duration
	if s := it.job.spec.Setup; s != nil {
		d = s.Timeout
	}
	return retry.NewDeadline(it.st.StartedAt, d.D())
}

// itemCaptures are the variables an item's steps read: the item's own
// captures, over its job's setup captures (an item's capture of the same
// name wins). The item's map itself is returned when the setup captured
// nothing, as it is for any job without one.
func itemCaptures(it *item) map[string]*wire.Capture {
	base := it.job.setupCaptures
	if len(base) == 0 || it.wi.Phase == messages.PhaseSetup {
		return it.st.Captures
	}
	if len(it.st.Captures) == 0 {
		return base
	}
	m := make(map[string]*wire.Capture, len(base)+len(it.st.Captures))
	maps.Copy(m, base)
	maps.Copy(m, it.st.Captures)
	return m
}
