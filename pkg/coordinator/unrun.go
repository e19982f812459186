package coordinator

import "github.com/jetfleet/jetfleet/pkg/messages"

// unrunProblems refuses, at submission, the fields of Prodigy's workflows
// that pkg/jobspec reads and validates but that this fleet does not run:
// a job that uses one would otherwise run without it, or not at all
// (docs/job-spec.md, "Prodigy's workflows": the feature table says what
// each field does).
func unrunProblems(spec *messages.JobSpec) []messages.FieldError {
	var problems []messages.FieldError
	add := func(field, msg string) {
		problems = append(problems, messages.FieldError{Field: field, Message: msg})
	}
	if spec.Setup != nil {
		add("setup", "setup phases are not run by this fleet yet: generate the items before submitting (fleetctl submit uploads the input file)")
	}
	if spec.InputCommand != "" {
		add("input_command", "input commands are not run by this fleet yet: run the command and submit its output as the input file")
	}
	return problems
}
