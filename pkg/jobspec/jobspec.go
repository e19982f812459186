package jobspec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrRead is wrapped by the error of ParseFile and ParseRetryConfigFile
// when the file cannot be read.
var ErrRead = errors.New("jobspec: cannot read file")

// Parse decodes and validates a job spec written in YAML 1.2 or JSON (a
// document that is a JSON object is read as JSON). The same field names
// and forms are accepted in both, and both give identical structs. Every
// problem is reported at once in a *messages.ValidationError
// (errors.Is(err, messages.ErrInvalidSpec) holds), each with its field path
// and, when the document spans several lines, its line: `agent_template[1]
// .timeout (line 12): invalid duration "5 seconds": ...`. Duplicate keys
// and non-string YAML keys are problems too, and so are shell commands
// whose ${...} references stand where no quoting keeps a value literal
// (arithmetic, variable names, eval, ...; see docs/security.md).
func Parse(data []byte) (*messages.JobSpec, error) {
	return parseSpec(data, isJSON(data))
}

// ParseFile reads and parses a job spec file: JSON when its name ends in
// ".json", otherwise YAML or JSON by content.
func ParseFile(path string) (*messages.JobSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	return parseSpec(data, strings.EqualFold(filepath.Ext(path), ".json") || isJSON(data))
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

// Warnings returns what a valid job spec sets that is accepted as it is but
// probably not meant so, each with its field path and line: an
// initial_delay above max_delay, whose delays are all capped at max_delay.
// It returns nil for a spec with problems (Parse reports those).
func Warnings(data []byte) []messages.FieldError {
	t := readTree(data, isJSON(data))
	if t.value == nil {
		return nil
	}
	var spec messages.JobSpec
	d := newDecoder()
	d.value("", t.value, reflect.ValueOf(&spec).Elem())
	v := &validator{bad: d.bad, given: d.given}
	v.jobSpec(&spec)
	if len(t.problems)+len(d.problems)+len(v.problems) > 0 {
		return nil
	}
	setLines(v.warnings, t.lines)
	return v.warnings
}

// ParseRetryConfig decodes and validates a standalone retry_config
// document in YAML or JSON, as a step's retry_config is validated. The
// document may also be wrapped as {retry_config: {...}}, so that a spec
// fragment can be used as is. Problem paths are relative to the retry
// config ("backoff.exponential.base"), or start with "retry_config." when
// the document is wrapped.
func ParseRetryConfig(data []byte) (*messages.RetryConfig, error) {
	t := readTree(data, isJSON(data))
	if t.value == nil && len(t.problems) > 0 {
		return nil, &messages.ValidationError{Kind: messages.KindRetryConfig, Problems: t.problems}
	}
	path, value := "", t.value
	if m, ok := value.(map[string]any); ok && len(m) == 1 {
		if inner, ok := m["retry_config"]; ok {
			path, value = "retry_config", inner
		}
	}
	var rc messages.RetryConfig
	d := newDecoder()
	d.value(path, value, reflect.ValueOf(&rc).Elem())
	v := &validator{bad: d.bad, given: d.given}
	v.retryConfig(path, &rc, false)
	if err := t.invalid(messages.KindRetryConfig, d, v); err != nil {
		return nil, err
	}
	return &rc, nil
}

// ParseRetryConfigFile reads and parses a retry_config file.
func ParseRetryConfigFile(path string) (*messages.RetryConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	return ParseRetryConfig(data)
}

// parseSpec reads a job spec: one front end for JSON and YAML (tree.go),
// one strict decoder (decode.go), validation (validate.go) and the shell
// checks of package shell, which run on the spec as decoded even when it
// has problems (theirs are dropped at or under a field that failed to
// decode).
func parseSpec(data []byte, asJSON bool) (*messages.JobSpec, error) {
	t := readTree(data, asJSON)
	if t.value == nil && len(t.problems) > 0 {
		return nil, &messages.ValidationError{Problems: t.problems}
	}
	var spec messages.JobSpec
	d := newDecoder()
	d.value("", t.value, reflect.ValueOf(&spec).Elem())
	v := &validator{bad: d.bad, given: d.given}
	v.jobSpec(&spec)
	for _, p := range shell.CheckSpec(&spec) {
		v.addf(p.Field, "%s", p.Message)
	}
	if err := t.invalid("", d, v); err != nil {
		return nil, err
	}
	return &spec, nil
}

// invalid returns every problem of the document (its own, the decoder's,
// the validator's) in a *messages.ValidationError of kind, each with its
// line, or nil when there are none.
func (t tree) invalid(kind string, d *decoder, v *validator) error {
	problems := append(append(t.problems, d.problems...), v.problems...)
	if len(problems) == 0 {
		return nil
	}
	setLines(problems, t.lines)
	return &messages.ValidationError{Kind: kind, Problems: problems}
}

// setLines gives each problem without a line the line of its field, or
// else of its nearest ancestor in lines (field path to 1-based line), then
// orders the problems by line, document-level problems (no line) first,
// keeping the order of problems on the same line.
func setLines(problems []messages.FieldError, lines map[string]int) {
	if len(lines) == 0 {
		return
	}
	for i := range problems {
		p := &problems[i]
		for path, ok := p.Field, true; ok && path != "" && p.Line == 0; path, ok = parentPath(path) {
			p.Line = lines[path]
		}
	}
	slices.SortStableFunc(problems, func(a, b messages.FieldError) int { return cmp.Compare(a.Line, b.Line) })
}

// parentPath returns the path one level up, and false for the document.
func parentPath(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i], true
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i], true
	}
	return "", true
}

// under reports whether path p is base or inside it.
func under(p, base string) bool {
	if base == "" || p == base {
		return true
	}
	return strings.HasPrefix(p, base) && len(p) > len(base) && (p[len(base)] == '.' || p[len(base)] == '[')
}

// isJSON reports whether data is a JSON object (YAML flow mappings such as
// {a: b} are not JSON and go to the YAML parser).
func isJSON(data []byte) bool {
	d := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}
