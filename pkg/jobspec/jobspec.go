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
	"github.com/jetfleet/jetfleet/internal/specenv"
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

func init() { // fleetctl --profile (internal/specenv.Parse)
	specenv.RegisterParser(func(data []byte, profile string) (*messages.JobSpec, error) {
		return parseSpec(data, isJSON(data), profile)
	})
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
// initial_delay above max_delay, whose delays are all capped at max_delay,
// and every field accepted that has no effect (a jitter_factor without
// jitter, error_policy.retry_config under on_item_failure: skip, ...).
// It returns nil for a spec with problems (Parse reports those).
func Warnings(data []byte) []messages.FieldError {
	r := readSpec(data, isJSON(data))
	if r.problems() > 0 {
		return nil
	}
	warnings := append(r.rw.renamed(r.v.warnings), r.rw.warnings...)
	setLines(warnings, r.t.lines)
	return warnings
}

// Explain returns what a job spec means in jetfleet's own terms: the spec
// as jetfleet reads it (the layout rewritten, nothing filled in; see
// WithDefaults for the effective values) and a note for each field written
// in another layout (Prodigy's map: or commands:, AD-44's submission
// fields) saying what it became, with its path and line. A spec with
// problems returns them as Parse does.
func Explain(data []byte) (*messages.JobSpec, []messages.FieldError, error) {
	spec, err := Parse(data)
	if err != nil {
		return nil, nil, err
	}
	r := readSpec(data, isJSON(data))
	notes := r.rw.notes
	setLines(notes, r.t.lines)
	return spec, notes, nil
}

// ExplainVariables says, for each step of a valid spec document, the
// variables its commands and its condition can read and where each comes
// from: the item, the agent, the job's env, the steps before it, the map
// phase (fleetctl validate --explain).
func ExplainVariables(data []byte) ([]messages.FieldError, error) {
	spec, err := Parse(data)
	if err != nil {
		return nil, err
	}
	r := readSpec(data, isJSON(data))
	notes := variableNotes(spec, r.rw)
	setLines(notes, r.t.lines)
	return notes, nil
}

// read is a job spec document read: its tree, rewritten into jetfleet's
// layout, decoded and validated.
type read struct {
	t    tree
	rw   *rewrite
	spec messages.JobSpec
	d    *decoder
	v    *validator
}

// readSpec reads a document; profile, when set, is the job's profile
// over the document's (fleetctl --profile).
func readSpec(data []byte, asJSON bool, profile ...string) *read {
	r := &read{t: readTree(data, asJSON), d: newDecoder()}
	if r.t.value == nil && len(r.t.problems) > 0 {
		r.rw, r.v = &rewrite{}, &validator{}
		return r
	}
	env := specenv.Rewrite(r.t.value, strings.Join(profile, "")) // env's forms, the profile, ${NAME} numbers
	r.rw = rewriteLayout(&r.t)
	r.rw.adopt(env, specenv.RewriteSteps(r.t.value))
	for _, b := range r.rw.bad {
		r.d.bad[b] = true
	}
	r.d.value("", r.t.value, reflect.ValueOf(&r.spec).Elem())
	r.v = &validator{bad: r.d.bad, given: r.d.given}
	r.v.jobSpec(&r.spec)
	return r
}

func (r *read) problems() int {
	return len(r.t.problems) + len(r.rw.problems) + len(r.d.problems) + len(r.v.problems)
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
	if err := t.invalid(messages.KindRetryConfig, d, v, nil); err != nil {
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
func parseSpec(data []byte, asJSON bool, profile ...string) (*messages.JobSpec, error) {
	r := readSpec(data, asJSON, profile...)
	if r.t.value == nil && len(r.t.problems) > 0 {
		return nil, &messages.ValidationError{Problems: r.t.problems}
	}
	for _, p := range shell.CheckSpec(&r.spec) {
		r.v.addf(p.Field, "%s", p.Message)
	}
	if err := r.t.invalid("", r.d, r.v, r.rw); err != nil {
		return nil, err
	}
	return &r.spec, nil
}

// adopt takes in what the environment's rewrites did (internal/specenv;
// steps' paths are the rewritten tree's).
func (rw *rewrite) adopt(env, steps *specenv.Result) {
	for _, x := range env.Renames {
		rw.blocks = append(rw.blocks, rename{from: x.From, to: x.To})
	}
	rw.bad = append(append(rw.bad, env.Bad...), steps.Bad...)
	rw.notes = append(append(rw.notes, env.Notes...), rw.renamed(steps.Notes)...)
	rw.warnings = append(rw.warnings, env.Warnings...)
	rw.problems = append(append(rw.problems, env.Problems...), rw.renamed(steps.Problems)...)
}

// environment checks the job's environment fields (internal/specenv).
func (v *validator) environment(s *messages.JobSpec) {
	for _, p := range specenv.Check(s) {
		v.addf(p.Field, "%s", p.Message)
	}
}

// envNames are the variables a bare ${NAME} of a command reads.
func envNames(s *messages.JobSpec) map[string]string { return specenv.Names(s) }

// invalid returns every problem of the document (its own, the decoder's,
// the validator's, the layout rewrite's; the paths as written) in a *messages.ValidationError of kind, each with its
// line, or nil when there are none.
func (t tree) invalid(kind string, d *decoder, v *validator, rw *rewrite) error {
	problems := append(append(t.problems, rw.renamed(d.problems)...), rw.renamed(v.problems)...)
	if rw != nil {
		problems = append(problems, rw.problems...)
	}
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
