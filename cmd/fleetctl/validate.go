package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "validate", summary: "validate FILE: check a job spec, every problem with its field path", run: runValidate})
}

const validateUsage = "validate FILE [--json]"

// validateReport is the --json output of `validate`.
type validateReport struct {
	Valid    bool                  `json:"valid"`
	Problems []messages.FieldError `json:"problems"`
	// Warnings are what a valid spec sets that is accepted as it is but
	// probably not meant so (jobspec.Warnings): an initial_delay above
	// max_delay, capped.
	Warnings []messages.FieldError `json:"warnings,omitempty"`
	// Items counts the job's items: inline, or read from a local input
	// file through json_path as the coordinator will. 0 when the spec is
	// invalid or its input is in the object store.
	Items int64 `json:"items"`
	// Steps is the number of agent_template steps.
	Steps int `json:"steps"`
	// Groups is the number of best-effort groups (group_by), when counted.
	Groups int `json:"groups,omitempty"`
	// Notes say, with --explain, what each field written in another
	// layout (Prodigy's map: or commands:, AD-44's submission fields)
	// means in jetfleet's terms, and Spec is the job as jetfleet runs it:
	// rewritten into its own layout, defaults filled in.
	Notes []messages.FieldError `json:"notes,omitempty"`
	Spec  *messages.JobSpec     `json:"spec,omitempty"`
	// Template is set when the spec is valid except that it names no items
	// (no items and no input): the source documents' examples of a map:
	// block's steps and retry_config are written so. It validates, with a
	// warning; a submission still needs items or an input.
	Template bool `json:"template,omitempty"`
	// remote says where the items are when they are not counted: the
	// object store, a command's output, the setup phase's file.
	remote string
}

// runValidate checks a job spec file: the strict decoding and validation
// of pkg/jobspec, then a read of its items (inline, or the local input
// file relative to the spec's directory) that checks json_path, item ids
// and group_by as the coordinator would at submission. Exit 0 when valid,
// 2 when not or when the file cannot be read.
func runValidate(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "validate", validateUsage)
	asJSON := fs.Bool("json", false, `print {"valid", "problems": [{"field", "message", "line"}], "items", "steps"}`)
	explain := fs.Bool("explain", false, "also print what the job means in jetfleet's terms: a note on each field written in Prodigy's layout or with AD-44's names, and the spec as jetfleet runs it (its own layout, defaults filled in)")
	if code, ok := parseFlags(fs, validateFlagsFirst(args)); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	path := fs.Arg(0)
	rep := validateFile(ctx, path)
	if *explain && rep.Valid && !rep.Template {
		explainFile(path, rep)
	}
	if *asJSON {
		writeJSON(env.stdout, rep)
	} else if rep.Valid {
		for _, w := range rep.Warnings {
			fmt.Fprintf(env.stdout, "warning: %s\n", w.Error())
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(env.stdout, "note: %s\n", n.Error())
		}
		if rep.Spec != nil {
			fmt.Fprintf(env.stdout, "# %s in jetfleet's terms, defaults filled in:\n%s", path, specYAML(rep.Spec))
		}
		fmt.Fprintf(env.stdout, "%s: valid (%s)\n", path, validateSummary(rep))
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintln(env.stdout, p.Error())
		}
		n := len(rep.Problems)
		fmt.Fprintf(env.stderr, "fleetctl validate: %s: %d problem%s\n", path, n, map[bool]string{true: "", false: "s"}[n == 1])
	}
	if !rep.Valid {
		return exitUsage
	}
	return exitOK
}

func validateFile(ctx context.Context, path string) *validateReport {
	rep := &validateReport{Problems: []messages.FieldError{}}
	spec, err := jobspec.ParseFile(path)
	if err != nil {
		var ve *messages.ValidationError
		if errors.As(err, &ve) && len(ve.Problems) == 1 && noItems(ve.Problems[0]) {
			p := ve.Problems[0]
			p.Message = "no items and no input: valid as a template of steps; add items (or input) before submitting"
			rep.Valid, rep.Template = true, true
			rep.Warnings = append(rep.Warnings, p)
			if data, err := os.ReadFile(path); err == nil {
				rep.Warnings = append(rep.Warnings, jobspec.Warnings(data)...)
			}
			return rep
		}
		if ve != nil {
			rep.Problems = append(rep.Problems, ve.Problems...)
		} else {
			rep.Problems = append(rep.Problems, messages.FieldError{Message: err.Error()})
		}
		return rep
	}
	rep.Steps = len(spec.AgentTemplate)
	if data, err := os.ReadFile(path); err == nil {
		rep.Warnings = jobspec.Warnings(data)
	}
	if strings.HasPrefix(spec.Input, expand.ObjectStoreScheme) || spec.InputCommand != "" || spec.Setup != nil && spec.Input != "" {
		// Only the coordinator can read it: an upload, or what a command
		// or the setup phase will produce on an agent.
		rep.Valid, rep.remote = true, "items in the object store"
		switch {
		case spec.InputCommand != "":
			rep.remote = "items from input_command, run on an agent"
		case spec.Setup != nil && !strings.HasPrefix(spec.Input, expand.ObjectStoreScheme):
			rep.remote = "items from the file setup leaves at " + spec.Input
		}
		return rep
	}
	total, groups, err := expand.Count(ctx, spec, expand.FileOpener(filepath.Dir(path)))
	if err != nil {
		rep.Problems = append(rep.Problems, validateItemsProblem(spec, err))
		return rep
	}
	rep.Valid, rep.Items = true, total
	if spec.GroupBy != "" {
		rep.Groups = len(groups)
	}
	return rep
}

// validateItemsProblem attributes an error from reading the items to the
// field it concerns.
func validateItemsProblem(spec *messages.JobSpec, err error) messages.FieldError {
	msg := err.Error()
	var ie *expand.ItemError
	switch {
	case errors.As(err, &ie) && spec.Input == "":
		return messages.FieldError{Field: messages.IndexPath("items", int(ie.Index)), Message: ie.Err.Error()}
	case errors.Is(err, expand.ErrGroup) || errors.Is(err, expand.ErrTooManyGroups):
		return messages.FieldError{Field: "group_by", Message: msg}
	case errors.Is(err, expand.ErrSortTooLarge):
		return messages.FieldError{Field: "sort_by", Message: msg}
	case errors.Is(err, expand.ErrJSONPath) || errors.Is(err, expand.ErrPathNotFound) ||
		errors.Is(err, expand.ErrNotArray) || errors.Is(err, expand.ErrDuplicateField):
		return messages.FieldError{Field: "json_path", Message: msg}
	case spec.Input != "":
		return messages.FieldError{Field: "input", Message: msg}
	}
	return messages.FieldError{Field: "items", Message: msg}
}

// noItems reports whether p is the one problem of a spec that names no
// items: "items: required" in jetfleet's layout, "map.input: required" in
// Prodigy's.
func noItems(p messages.FieldError) bool {
	switch p.Field {
	case "items", "input", "map.input":
		return strings.HasPrefix(p.Message, "required")
	}
	return false
}

func validateSummary(rep *validateReport) string {
	if rep.Template {
		return "a template: no items"
	}
	plural := func(n int64, word string) string {
		if n == 1 {
			return fmt.Sprintf("1 %s", word)
		}
		return fmt.Sprintf("%d %ss", n, word)
	}
	items := plural(rep.Items, "item")
	if rep.remote != "" {
		items = rep.remote
	}
	if rep.Groups > 0 {
		items += " in " + plural(int64(rep.Groups), "group")
	}
	return items + ", " + plural(int64(rep.Steps), "step")
}

// validateFlagsFirst moves flags before the file argument, so that both
// `validate --json FILE` and `validate FILE --json` work.
func validateFlagsFirst(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			continue
		}
		rest = append(rest, a)
	}
	return append(append(flags, "--"), rest...)
}

// explainFile adds the notes and the effective spec of a valid spec file
// to rep.
func explainFile(path string, rep *validateReport) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	spec, notes, err := jobspec.Explain(data)
	if err != nil {
		return
	}
	vars, _ := jobspec.ExplainVariables(data) // the variables each step reads
	rep.Notes, rep.Spec = append(notes, vars...), jobspec.WithDefaults(spec)
}

// specYAML renders a spec as block-style YAML, fields in the order of its
// JSON form.
func specYAML(spec *messages.JobSpec) string {
	data, err := json.Marshal(spec)
	if err != nil {
		return err.Error() + "\n"
	}
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return err.Error() + "\n"
	}
	var block func(*yaml.Node)
	block = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			block(c)
		}
	}
	block(&n)
	var out strings.Builder
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err.Error() + "\n"
	}
	return out.String()
}
