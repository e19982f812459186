// Package prodigystep reads the fields of a Prodigy workflow step that
// jetfleet's own step does not have, on a spec's document tree before it
// is decoded (package jobspec's layout rewrite calls it for every step):
//
//   - fields that change nothing jetfleet can do (validate, analysis,
//     outputs, options, args, metadata, description) are removed with a
//     warning that says what happens instead;
//   - an analyze: step becomes a step that does nothing, with a warning;
//   - ${step.files_added:PATTERN} becomes the pattern itself, with a warning;
//   - foreach: in Prodigy's form (foreach: a list or a command, parallel:
//     true) becomes jetfleet's (items or command, parallel: N);
//   - on_exit_code handlers written as a command become {shell} or {claude};
//   - an on_success with an on_success of its own becomes one command that
//     runs them in turn;
//   - in the step's own handlers, ${NAME} of the variable the step
//     captures is ${shell.output}: the step's output, as Prodigy gives a
//     handler its step's capture (a step that fails captures nothing in
//     jetfleet).
//
// HandlerOptions reads the options of a step's on_failure handler
// (max_attempts, handler_failure_fatal, timeout, ...) for jobspec, which
// rewrites the handler itself into the step's fallback.
//
// Paths in a Result are relative to the step. It is pure and safe for
// concurrent use on distinct trees.
package prodigystep

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Rename maps a path of the rewritten step (From, and everything under
// it) to the path it was written at (To), both relative to the step.
type Rename struct{ From, To string }

// Result is what Rewrite did to a step.
type Result struct {
	// Notes say what a rewritten field means; Warnings name the fields
	// accepted without effect; Problems are refusals. Fields are relative
	// to the step.
	Notes, Warnings, Problems []messages.FieldError
	Renames                   []Rename
}

func (r *Result) notef(p, format string, args ...any) {
	r.Notes = append(r.Notes, messages.FieldError{Field: p, Message: fmt.Sprintf(format, args...)})
}

func (r *Result) warnf(p, format string, args ...any) {
	r.Warnings = append(r.Warnings, messages.FieldError{Field: p, Message: fmt.Sprintf(format, args...)})
}

func (r *Result) addf(p, format string, args ...any) {
	r.Problems = append(r.Problems, messages.FieldError{Field: p, Message: fmt.Sprintf(format, args...)})
}

// DefaultParallel is a foreach's parallel: true, as Prodigy reads it.
const DefaultParallel = 10

// noEffect are the step fields of Prodigy that jetfleet accepts without
// effect, and what happens instead.
var noEffect = map[string]string{
	"description": "has no effect: a step is labelled by its name (name:, by default step-N)",
	"analysis":    "has no effect: jetfleet keeps no codebase analysis for claude commands (Prodigy's analysis cache); the command runs without one",
	"options":     "has no effect: Prodigy's structured-command options; the step runs its command as written",
	"args":        "has no effect: Prodigy's structured-command arguments; the step runs its command as written",
	"metadata":    "has no effect: Prodigy's structured-command metadata; set retry_config, timeout or allow_failure on the step instead",
	"outputs": "has no effect: jetfleet does not collect the files a step's commits add; a later ${ID.NAME} of a declared output is not set, " +
		"and a step that reads it fails when it runs unless it gives a default (${ID.NAME:-text})",
	"output":        "has no effect: not a field of Prodigy's steps either (Prodigy ignores it; output_file is refused: not yet)",
	"fail_workflow": "has no effect on a step (Prodigy ignores it there; it belongs in on_failure): a step that fails stops the workflow unless allow_failure or on_failure says otherwise",
	"validate": "has no effect: jetfleet does not run Prodigy's completeness check (its commands, result_file, threshold, on_incomplete): " +
		"the step succeeds or fails by its own command; run the check as a step of its own after it",
}

// Rewrite rewrites the Prodigy fields of step st in place. Fields only
// Prodigy has (those without effect, analyze, ${step.files_added}) are
// read only in Prodigy's layout (prodigy); elsewhere they stay unknown.
func Rewrite(st map[string]any, prodigy bool) *Result {
	r := &Result{}
	if prodigy {
		for _, k := range slices.Sorted(maps.Keys(noEffect)) {
			if _, ok := st[k]; ok {
				delete(st, k)
				r.warnf(k, "%s", noEffect[k])
			}
		}
		r.analyze(st)
		r.filesAdded(st)
		r.shellVariables(st)
	}
	r.foreach(st)
	r.onExitCode(st)
	r.claudeOnSuccess(st)
	r.nestedOnSuccess(st)
	r.selfRefs(st)
	return r
}

// analyze turns Prodigy's analyze: step (a refresh of its codebase
// analysis cache) into a step that does nothing.
func (r *Result) analyze(st map[string]any) {
	if _, ok := st["analyze"]; !ok || st["shell"] != nil || st["claude"] != nil {
		return
	}
	delete(st, "analyze")
	st["shell"] = ":"
	r.Renames = append(r.Renames, Rename{From: "shell", To: "analyze"})
	r.warnf("analyze", "has no effect: jetfleet keeps no codebase analysis (Prodigy's analysis cache); the step runs `:` and does nothing")
}

// filesAddedRef is Prodigy's ${step.files_added:PATTERN}: the files the
// step's commits added that match PATTERN.
var filesAddedRef = regexp.MustCompile(`\$\{\s*(?:step|workflow)\.files_added\s*(?::([^}]*))?\}`)

func (r *Result) filesAdded(st map[string]any) {
	for _, k := range []string{"shell", "claude"} {
		s, ok := st[k].(string)
		if !ok || !filesAddedRef.MatchString(s) {
			continue
		}
		st[k] = filesAddedRef.ReplaceAllStringFunc(s, func(m string) string {
			return strings.TrimSpace(filesAddedRef.FindStringSubmatch(m)[1])
		})
		r.warnf(k, "${step.files_added:PATTERN} (${workflow.files_added:...}: Prodigy's files the step's or the workflow's commits added that match it) is the pattern itself: "+
			"jetfleet does not track the files a step adds; a shell expands the pattern to the files that match, a claude prompt reads it as text")
	}
}

// foreach reads Prodigy's foreach form: {foreach: a list or a command,
// parallel: true|false|N, do, continue_on_error, max_items}; also the
// form {items: a list or a command}.
func (r *Result) foreach(st map[string]any) {
	fe, ok := st["foreach"].(map[string]any)
	if !ok {
		return
	}
	if fe["foreach"] != nil && fe["items"] != nil {
		r.addf("foreach.items", "set the elements once: foreach (Prodigy's name) or items")
		return
	}
	for _, k := range []string{"foreach", "items"} {
		v, has := fe[k]
		if !has {
			continue
		}
		delete(fe, k)
		switch x := v.(type) {
		case string:
			fe["command"] = x
			r.Renames = append(r.Renames, Rename{From: "foreach.command", To: "foreach." + k})
			r.notef("foreach."+k, "a command: its non-empty output lines are the elements, run in the item's directory")
		case []any:
			items := make([]any, len(x))
			for i, e := range x {
				switch y := e.(type) {
				case string:
					items[i] = y
				case json.Number:
					items[i] = y.String()
				case bool:
					items[i] = strconv.FormatBool(y)
				default:
					r.addf(messages.IndexPath("foreach."+k, i), "expected a string, got %T (an element is text, ${item} in do)", e)
					return
				}
			}
			fe["items"] = items
			if k != "items" {
				r.Renames = append(r.Renames, Rename{From: "foreach.items", To: "foreach." + k})
			}
		default:
			r.addf("foreach."+k, "expected a list of elements or a command, got %v", v)
			return
		}
		break
	}
	switch p := fe["parallel"].(type) {
	case bool:
		if p {
			fe["parallel"] = json.Number(strconv.Itoa(DefaultParallel))
			r.notef("foreach.parallel", "true: %d elements at a time, as Prodigy runs them", DefaultParallel)
		} else {
			delete(fe, "parallel")
		}
	}
}

// onExitCode reads on_exit_code handlers written as a command (a slash
// first: a claude command, as Prodigy reads a handler).
func (r *Result) onExitCode(st map[string]any) {
	m, ok := st["on_exit_code"].(map[string]any)
	if !ok {
		return
	}
	for k, v := range m {
		if s, isStr := v.(string); isStr {
			kind := "shell"
			if strings.HasPrefix(strings.TrimSpace(s), "/") {
				kind = "claude"
			}
			m[k] = map[string]any{kind: s}
			r.Renames = append(r.Renames, Rename{From: "on_exit_code." + k + "." + kind, To: "on_exit_code." + k})
		}
	}
}

// claudeOnSuccess reads on_success: {claude: X} as the handler of exit
// code 0, which runs when the command succeeds and fails the step when it
// fails, as an on_success does.
func (r *Result) claudeOnSuccess(st map[string]any) {
	os, ok := st["on_success"].(map[string]any)
	if !ok || len(os) != 1 || os["claude"] == nil {
		return
	}
	ec, _ := st["on_exit_code"].(map[string]any)
	if st["on_exit_code"] != nil && ec == nil || ec["0"] != nil {
		return // the decoder, or the validation of on_success, reports it
	}
	if ec == nil {
		ec = map[string]any{}
		st["on_exit_code"] = ec
	}
	delete(st, "on_success")
	ec["0"] = os
	r.Renames = append(r.Renames, Rename{From: "on_exit_code.0", To: "on_success"})
	r.notef("on_success", "a claude command: the handler of exit code 0 (on_exit_code: {0: ...}), run when the command succeeds; when it fails, the step fails")
}

// nestedOnSuccess flattens on_success: {shell: A, on_success: {shell: B}}
// into one command that runs A, then B if A succeeded. A handler of a
// nested command (its on_failure) is accepted with a warning.
func (r *Result) nestedOnSuccess(st map[string]any) {
	os, ok := st["on_success"].(map[string]any)
	if !ok || os["on_success"] == nil {
		return
	}
	var cmds []string
	p := "on_success"
	for cur := os; cur != nil; p += ".on_success" {
		s, isStr := cur["shell"].(string)
		if !isStr {
			r.addf(p, "not yet: a nested on_success is a shell command, {shell: \"...\"}")
			delete(st, "on_success")
			return
		}
		cmds = append(cmds, s)
		for _, k := range []string{"on_failure", "on_exit_code"} {
			if cur[k] != nil && p != "on_success" {
				r.warnf(p+"."+k, "has no effect: the handlers of a nested on_success command do not run; when it fails, the step fails under its retry_config")
			}
		}
		next, _ := cur["on_success"].(map[string]any)
		if cur["on_success"] != nil && next == nil {
			r.addf(p+".on_success", "expected {shell: \"...\"}, got %v", cur["on_success"])
			delete(st, "on_success")
			return
		}
		cur = next
	}
	if os["on_failure"] != nil {
		r.warnf("on_success.on_failure", "has no effect: the handlers of an on_success command do not run; when it fails, the step fails under its retry_config")
	}
	st["on_success"] = map[string]any{"shell": "set -e\n" + strings.Join(cmds, "\n")}
	r.notef("on_success", "with the on_success commands nested in it: %d commands run in turn after the step succeeds, stopping at the first that fails (which fails the step)", len(cmds))
}

// selfRefs makes ${NAME}, where the step captures NAME, read
// ${shell.output} in the step's own handlers: they run before the capture
// is stored (or, for a failed step, when there is none). ${shell.stderr}
// there, which Prodigy's handlers read, is ${shell.output} too: the failed
// run's stdout, then its stderr.
func (r *Result) selfRefs(st map[string]any) {
	name, _ := st["capture_output"].(string)
	if name == "" {
		name, _ = st["capture"].(string)
	}
	refs := map[string]*regexp.Regexp{"shell.stderr": regexp.MustCompile(`(^|[^$])\$\{(\s*)shell\.stderr(\s*[}|:])`)}
	if name != "" {
		refs[name] = regexp.MustCompile(`(^|[^$])\$\{(\s*)` + regexp.QuoteMeta(name) + `(\s*[}|:])`)
	}
	changed := map[string]bool{}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			for n, ref := range refs {
				if ref.MatchString(x) {
					changed[n] = true
					x = ref.ReplaceAllString(x, "${1}$${${2}shell.output${3}")
				}
			}
			return x
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for _, k := range []string{"shell", "claude", "commands"} {
				if x[k] != nil {
					x[k] = walk(x[k])
				}
			}
		}
		return v
	}
	for _, k := range []string{"on_failure", "on_exit_code"} {
		h, ok := st[k]
		if !ok {
			continue
		}
		if ec, isMap := h.(map[string]any); isMap && k == "on_exit_code" {
			for code := range ec {
				ec[code] = walk(ec[code])
			}
		} else {
			st[k] = walk(h)
		}
		if changed[name] {
			r.notef(k, "${%s}, the variable this step captures, is ${shell.output} here: the step's output (a failed step's stdout then stderr)", name)
		}
		if changed["shell.stderr"] {
			r.warnf(k, "${shell.stderr} is ${shell.output} here: the failed run's stdout, then its stderr (jetfleet keeps them together for a handler)")
		}
		clear(changed)
	}
}

// shellVariables leaves to the shell a ${NAME} that the step's own script
// assigns (NAME=...): Prodigy leaves a variable it does not know as
// written, so such a reference is the script's own variable; jetfleet
// writes it $${NAME}, its literal ${NAME}.
func (r *Result) shellVariables(st map[string]any) {
	s, ok := st["shell"].(string)
	if !ok || !strings.Contains(s, "${") {
		return
	}
	var names []string
	for _, m := range shellAssign.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	var left []string
	for _, name := range names {
		ref := regexp.MustCompile(`(^|[^$])\$\{` + regexp.QuoteMeta(name) + `\}`)
		if ref.MatchString(s) {
			s = ref.ReplaceAllString(s, "${1}$$$${"+name+"}")
			left = append(left, "${"+name+"}")
		}
	}
	if len(left) > 0 {
		st["shell"] = s
		r.notef("shell", "%s: assigned by the script itself, left to the shell (Prodigy leaves a variable it does not know as written)", strings.Join(left, ", "))
	}
}

// shellAssign finds the shell variables a script assigns: NAME=value at
// the start of a command.
var shellAssign = regexp.MustCompile(`(?m)(?:^|[;&|({]|\s)([A-Za-z_][A-Za-z0-9_]*)=`)

// HandlerSteps returns a list of handler commands (a step's on_failure as
// a list, or its commands) as steps: a string is a shell command, or a
// claude one when it starts with a slash, as Prodigy reads a handler; an
// object stays as it is.
func HandlerSteps(handler any) []any {
	list, _ := handler.([]any)
	if m, isObj := handler.(map[string]any); isObj {
		list, _ = m["commands"].([]any)
	}
	steps := make([]any, len(list))
	for i, e := range list {
		steps[i] = e
		if s, isStr := e.(string); isStr {
			kind := "shell"
			if strings.HasPrefix(strings.TrimSpace(s), "/") {
				kind = "claude"
			}
			steps[i] = map[string]any{kind: s}
		}
	}
	return steps
}
