// Package oldspec is the spec front end as it was before it moved to
// pkg/jobspec: the old jobspec package and, in oldmessages, a verbatim copy
// of the old pkg/messages (its strict JSON decoder, validation and
// defaults). It exists only for the differential test of the new front end
// and goes once that test has passed.
package oldspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	messages "github.com/jetfleet/jetfleet/internal/oldspec/oldmessages"
	"github.com/jetfleet/jetfleet/internal/shell"
	newmessages "github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrRead is wrapped by the error of ParseFile and ParseRetryConfigFile
// when the file cannot be read.
var ErrRead = errors.New("jobspec: cannot read file")

// Parse decodes and validates a job spec written in YAML 1.2 or JSON. The
// same field names and forms are accepted in both, and both give identical
// structs. Every problem is reported at once in a *messages.ValidationError
// (errors.Is(err, messages.ErrInvalidSpec) holds), each with its field path
// and source line: `agent_template[1].timeout (line 12): invalid duration
// "5 seconds": ...`. YAML duplicate keys and non-string keys are problems
// too, and so are shell commands whose ${...} references stand where no
// quoting keeps a value literal (arithmetic, variable names, eval, ...;
// see docs/security.md).
func Parse(data []byte) (*messages.JobSpec, error) {
	if isJSON(data) {
		return messages.ParseJobSpec(data, checkShell)
	}
	t := parseYAML(data)
	if t.value == nil && len(t.problems) > 0 {
		return nil, &messages.ValidationError{Problems: t.problems}
	}
	spec, err := messages.DecodeJobSpec(t.value, checkShell)
	if err = merge(err, t, ""); err != nil {
		return nil, err
	}
	return spec, nil
}

// ParseFile reads and parses a job spec file: JSON when its name ends in
// ".json", otherwise YAML or JSON by content.
func ParseFile(path string) (*messages.JobSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return messages.ParseJobSpec(data, checkShell)
	}
	return Parse(data)
}

// ToJSON converts a job spec in YAML or JSON to canonical JSON, the form
// the jobs.submit API takes. The spec is validated first; defaults are not
// filled in.
func ToJSON(data []byte) ([]byte, error) {
	spec, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(spec)
}

// ParseRetryConfig decodes and validates a standalone retry_config
// document in YAML or JSON, as a step's retry_config is validated. The
// document may also be wrapped as {retry_config: {...}}, so that a spec
// fragment can be used as is.
func ParseRetryConfig(data []byte) (*messages.RetryConfig, error) {
	if isJSON(data) {
		return messages.ParseRetryConfig(data)
	}
	t := parseYAML(data)
	if t.value == nil && len(t.problems) > 0 {
		return nil, &messages.ValidationError{Kind: messages.KindRetryConfig, Problems: t.problems}
	}
	rc, err := messages.DecodeRetryConfig(t.value)
	if err = merge(err, t, messages.KindRetryConfig); err != nil {
		return nil, err
	}
	return rc, nil
}

// ParseRetryConfigFile reads and parses a retry_config file.
func ParseRetryConfigFile(path string) (*messages.RetryConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	return ParseRetryConfig(data)
}

// merge combines the YAML-level problems of t with the decoder's error and
// gives every problem its line.
func merge(err error, t tree, kind string) error {
	var ve *messages.ValidationError
	if err != nil && !errors.As(err, &ve) {
		return err
	}
	if ve == nil && len(t.problems) == 0 {
		return nil
	}
	out := &messages.ValidationError{Kind: kind, Problems: append([]messages.FieldError(nil), t.problems...)}
	if ve != nil {
		out.Problems = append(out.Problems, ve.Problems...)
	}
	out.SetLines(t.lines)
	return out
}

// isJSON reports whether data is a JSON object (YAML flow mappings such as
// {a: b} are not JSON and go to the YAML parser).
func isJSON(data []byte) bool {
	d := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}

// checkShell runs the shell checks of package shell, which take the new
// types, on an old spec: it copies what they read (spec.ShellCommands).
func checkShell(spec *messages.JobSpec) []messages.FieldError {
	step := func(st *messages.Step) newmessages.Step {
		ns := newmessages.Step{Shell: st.Shell}
		if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil {
			ns.RetryConfig = &newmessages.RetryConfig{OnFailure: &newmessages.OnFailure{Action: rc.OnFailure.Action, Fallback: rc.OnFailure.Fallback}}
		}
		return ns
	}
	var s newmessages.JobSpec
	for i := range spec.AgentTemplate {
		s.AgentTemplate = append(s.AgentTemplate, step(&spec.AgentTemplate[i]))
	}
	for i := range spec.Reduce {
		s.Reduce = append(s.Reduce, step(&spec.Reduce[i]))
	}
	if ep := spec.ErrorPolicy; ep != nil && ep.OnItemFailure != nil && ep.OnItemFailure.Custom != nil {
		c := step(ep.OnItemFailure.Custom)
		s.ErrorPolicy = &newmessages.ErrorPolicy{OnItemFailure: &newmessages.ItemFailureAction{Action: ep.OnItemFailure.Action, Custom: &c}}
	}
	var out []messages.FieldError
	for _, p := range shell.CheckSpec(&s) {
		out = append(out, messages.FieldError{Field: p.Field, Message: p.Message, Line: p.Line})
	}
	return out
}

// ParseJSON is messages.ParseJobSpec as package jobspec called it: a JSON
// document, with the shell checks.
func ParseJSON(data []byte) (*messages.JobSpec, error) {
	return messages.ParseJobSpec(data, checkShell)
}
