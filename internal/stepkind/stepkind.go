// Package stepkind knows the kinds of step a job spec uses beyond shell
// commands and handlers: which capability an agent must announce to run
// each (messages.AgentPresence.Capabilities), every step of a spec
// including those nested in foreach bodies and exit-code handlers, and the
// shape rules of foreach steps and on_exit_code handlers
// (docs/job-spec.md). It is pure and safe for concurrent use.
package stepkind

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Bounds of a foreach step.
const (
	// MaxParallel bounds foreach.parallel.
	MaxParallel = 100
	// MaxItems bounds the elements of a foreach, listed or read from its
	// command's output: above it the step fails (or is refused, listed).
	MaxItems = 10000
	// MaxFallbackRuns bounds a fallback's max_attempts: the runs of its
	// step in one delivery.
	MaxFallbackRuns = 100
)

// Needs returns the capabilities step st itself needs (not those of the
// steps nested in it): claude (a claude step or fallback), write_file,
// foreach, handlers (on_exit_code, a fallback with fail_workflow), and
// fallback_runs (a fallback that reruns its step or has its own timeout).
func Needs(st *messages.Step) []string {
	var out []string
	if st.Claude != "" {
		out = append(out, messages.CapabilityClaude)
	}
	rc := st.RetryConfig
	if rc != nil && rc.OnFailure != nil && rc.OnFailure.Claude && !slices.Contains(out, messages.CapabilityClaude) {
		out = append(out, messages.CapabilityClaude)
	}
	if st.WriteFile != nil {
		out = append(out, messages.CapabilityWriteFile)
	}
	if st.Foreach != nil {
		out = append(out, messages.CapabilityForeach)
	}
	if len(st.OnExitCode) > 0 || rc != nil && rc.OnFailure != nil && (rc.OnFailure.FailWorkflow || len(rc.OnFailure.Steps) > 0) {
		out = append(out, messages.CapabilityHandlers)
	}
	if rc != nil && rc.OnFailure != nil && (rc.OnFailure.MaxAttempts > 1 || rc.OnFailure.Timeout > 0) {
		out = append(out, messages.CapabilityFallbackRuns)
	}
	return out
}

// Walk calls fn for every step of spec, with its field path: agent_template,
// reduce, setup.commands, a custom on_item_failure step, and the steps
// nested in them (foreach.do, on_exit_code handlers).
func Walk(spec *messages.JobSpec, fn func(field string, st *messages.Step)) {
	var walk func(p string, st *messages.Step)
	walk = func(p string, st *messages.Step) {
		fn(p, st)
		if fe := st.Foreach; fe != nil {
			for i := range fe.Do {
				walk(messages.IndexPath(messages.JoinPath(p, "foreach.do"), i), &fe.Do[i])
			}
		}
		for _, code := range sortedCodes(st.OnExitCode) {
			h := st.OnExitCode[code]
			walk(messages.JoinPath(messages.JoinPath(p, "on_exit_code"), code), &h)
		}
		if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil {
			for i := range rc.OnFailure.Steps {
				walk(messages.IndexPath(messages.JoinPath(p, fallbackSteps), i), &rc.OnFailure.Steps[i])
			}
		}
	}
	for i := range spec.AgentTemplate {
		walk(messages.IndexPath("agent_template", i), &spec.AgentTemplate[i])
	}
	for i := range spec.Reduce {
		walk(messages.IndexPath("reduce", i), &spec.Reduce[i])
	}
	if s := spec.Setup; s != nil {
		for i := range s.Commands {
			walk(messages.IndexPath("setup.commands", i), &s.Commands[i])
		}
	}
	if ep := spec.ErrorPolicy; ep != nil && ep.OnItemFailure != nil && ep.OnItemFailure.Custom != nil {
		walk("error_policy.on_item_failure.custom", ep.OnItemFailure.Custom)
	}
}

func sortedCodes(m map[string]messages.Step) []string {
	codes := make([]string, 0, len(m))
	for k := range m {
		codes = append(codes, k)
	}
	slices.Sort(codes)
	return codes
}

// fallbackPath is the path of a step's fallback, fallbackSteps of its steps.
const (
	fallbackPath  = "retry_config.on_failure.fallback"
	fallbackSteps = fallbackPath + ".steps"
)

// Problem is a problem found by Check, its Field relative to the step.
type Problem = messages.FieldError

// Check reports what is wrong with step st's foreach and on_exit_code,
// fields relative to the step. The nested steps are steps of their own:
// the caller validates them as such; Check says only which of their
// fields such a place does not take.
func Check(st *messages.Step) []Problem {
	var out []Problem
	addf := func(p, format string, args ...any) {
		out = append(out, Problem{Field: p, Message: fmt.Sprintf(format, args...)})
	}
	if fe := st.Foreach; fe != nil {
		if st.Shell != "" || st.Claude != "" || st.Handler != "" || st.WriteFile != nil {
			addf("foreach", "set only one of shell, handler, claude, write_file or foreach")
		}
		switch {
		case len(fe.Items) > 0 && fe.Command != "":
			addf("foreach", "set items (a list) or command, not both")
		case len(fe.Items) == 0 && fe.Command == "":
			addf("foreach", "needs items (a list of elements) or command (whose output lines are)")
		case len(fe.Items) > MaxItems:
			addf("foreach.items", "%d elements, more than %d", len(fe.Items), MaxItems)
		}
		if len(fe.Do) == 0 {
			addf("foreach.do", "needs at least one step")
		}
		if fe.Parallel < 0 || fe.Parallel > MaxParallel {
			addf("foreach.parallel", "must be 0 to %d (true: %d), got %d", MaxParallel, 10, fe.Parallel)
		}
		if fe.MaxItems < 0 {
			addf("foreach.max_items", "must not be negative, got %d", fe.MaxItems)
		}
		for i := range fe.Do {
			nested(addf, messages.IndexPath("foreach.do", i), &fe.Do[i], "a foreach body")
		}
	}
	if len(st.OnExitCode) > 0 && st.Shell == "" && st.Claude == "" {
		addf("on_exit_code", "only on shell and claude steps (a command that exits with a code)")
	}
	if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil {
		of := rc.OnFailure
		if of.MaxAttempts < 0 || of.MaxAttempts > MaxFallbackRuns {
			addf(fallbackPath+".max_attempts", "must be 1 to %d (the step's runs in one delivery), got %d", MaxFallbackRuns, of.MaxAttempts)
		}
		if of.Timeout < 0 {
			addf(fallbackPath+".timeout", "must not be negative, got %s", of.Timeout)
		}
		for i := range rc.OnFailure.Steps {
			hp, h := messages.IndexPath(fallbackSteps, i), &rc.OnFailure.Steps[i]
			if h.Handler != "" || h.WriteFile != nil {
				addf(hp, "not yet: a handler command is a shell or claude command")
			}
			nested(addf, hp, h, "a handler list")
		}
	}
	for _, code := range sortedCodes(st.OnExitCode) {
		p := messages.JoinPath("on_exit_code", code)
		if n, err := strconv.Atoi(code); err != nil || n < 0 || n > 255 || strconv.Itoa(n) != code {
			addf(p, "expected an exit code, 0 to 255")
			continue
		}
		h := st.OnExitCode[code]
		if h.Handler != "" {
			addf(messages.JoinPath(p, "handler"), "not yet: an exit-code handler is a shell or claude command")
		}
		nested(addf, p, &h, "an exit-code handler")
	}
	return out
}

// nested reports the fields a nested step (of a foreach body, or an
// exit-code handler) does not take.
func nested(addf func(p, format string, args ...any), p string, st *messages.Step, where string) {
	set := map[string]bool{
		"handler": st.Handler != "" && where == "a foreach body", "foreach": st.Foreach != nil,
		"capture": st.Capture != "", "when": st.When != "", "on_success": st.OnSuccess != "",
		"on_exit_code": len(st.OnExitCode) > 0, "limit": st.Limit != nil,
		"retry_config.on_failure": st.RetryConfig != nil && st.RetryConfig.OnFailure != nil && st.RetryConfig.OnFailure.Fallback != "",
	}
	for _, k := range []string{"handler", "foreach", "capture", "when", "on_success", "on_exit_code", "limit", "retry_config.on_failure"} {
		if set[k] {
			addf(messages.JoinPath(p, k), "not yet in %s: it runs shell, claude and write_file steps, each once, with timeout and working_dir", where)
		}
	}
}
