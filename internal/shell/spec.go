package shell

import (
	"errors"
	"slices"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// CheckSpec reports every reference of spec's shell commands (steps,
// fallbacks, a custom on_item_failure step) that stands where no quoting
// is safe, and every command with references that does not parse (see
// [Compile]), each with the command's field path. A command that is not a
// valid template is left to the spec's own validation. Package jobspec
// runs it on every spec it reads.
func CheckSpec(spec *messages.JobSpec) []messages.FieldError {
	var out []messages.FieldError
	for _, c := range commands(spec) {
		t, err := wire.ParseTemplate(c.Command)
		if err != nil {
			continue
		}
		err = Validate(t)
		if err == nil {
			continue
		}
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok && !errors.Is(err, ErrSyntax) {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			out = append(out, messages.FieldError{Field: c.Field, Message: e.Error()})
		}
	}
	return out
}

// shellCommand is one shell command of a job spec, with its field path.
type shellCommand struct {
	// Field is the command's path, e.g. "agent_template[0].shell" or
	// "reduce[1].retry_config.on_failure.fallback.command".
	Field string
	// Command is the template as written.
	Command string
}

// commands lists every shell command of s that an agent runs: the
// steps of agent_template and reduce, their fallback commands, and a custom
// on_item_failure step. Empty commands are left out.
func commands(s *messages.JobSpec) []shellCommand {
	var out []shellCommand
	var step func(p string, st *messages.Step)
	step = func(p string, st *messages.Step) {
		if st.Shell != "" {
			out = append(out, shellCommand{Field: messages.JoinPath(p, "shell"), Command: st.Shell})
		}
		if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil && rc.OnFailure.Fallback != "" && !rc.OnFailure.Claude {
			out = append(out, shellCommand{Field: messages.JoinPath(p, "retry_config.on_failure.fallback.command"), Command: rc.OnFailure.Fallback})
		}
		if st.OnSuccess != "" {
			out = append(out, shellCommand{Field: messages.JoinPath(p, "on_success"), Command: st.OnSuccess})
		}
		if fe := st.Foreach; fe != nil && fe.Command != "" {
			out = append(out, shellCommand{Field: messages.JoinPath(p, "foreach.command"), Command: fe.Command})
		}
		nested(p, st, step)
	}
	for i := range s.AgentTemplate {
		step(messages.IndexPath("agent_template", i), &s.AgentTemplate[i])
	}
	for i := range s.Reduce {
		step(messages.IndexPath("reduce", i), &s.Reduce[i])
	}
	if ep := s.ErrorPolicy; ep != nil && ep.OnItemFailure != nil && ep.OnItemFailure.Custom != nil {
		step("error_policy.on_item_failure.custom", ep.OnItemFailure.Custom)
	}
	return out
}

// nested calls step for the steps nested in st: a foreach's body and its
// exit-code handlers.
func nested(p string, st *messages.Step, step func(string, *messages.Step)) {
	if fe := st.Foreach; fe != nil {
		for i := range fe.Do {
			step(messages.IndexPath(messages.JoinPath(p, "foreach.do"), i), &fe.Do[i])
		}
	}
	if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil {
		for i := range rc.OnFailure.Steps {
			step(messages.IndexPath(messages.JoinPath(p, "retry_config.on_failure.fallback.steps"), i), &rc.OnFailure.Steps[i])
		}
	}
	codes := make([]string, 0, len(st.OnExitCode))
	for c := range st.OnExitCode {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		h := st.OnExitCode[c]
		step(messages.JoinPath(messages.JoinPath(p, "on_exit_code"), c), &h)
	}
}
