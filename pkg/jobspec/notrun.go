package jobspec

import "github.com/jetfleet/jetfleet/pkg/messages"

// NotRun lists the fields of s that are read and validated but that this
// version of jetfleet does not run: Prodigy's setup phase and its
// map.input commands. A coordinator refuses a job that sets one at
// submission, by field, so that it never runs without them; Warnings
// reports them too, so that `fleetctl validate` says so before a
// submission does (docs/job-spec.md, "Prodigy's workflows, field by
// field").
func NotRun(s *messages.JobSpec) []messages.FieldError {
	var out []messages.FieldError
	if s.Setup != nil {
		out = append(out, messages.FieldError{Field: "setup", Message: "setup phases are not run by this version of jetfleet: a coordinator refuses the job (generate the items before submitting; fleetctl submit uploads the input file)"})
	}
	if s.InputCommand != "" {
		out = append(out, messages.FieldError{Field: "input_command", Message: "input commands are not run by this version of jetfleet: a coordinator refuses the job (run the command and submit its output as the input file)"})
	}
	return out
}
