package retry

import (
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// FailureAction is a step's on_failure: what the agent does once the step
// gives up (any reason: attempts, retry_budget, not_retryable, permanent, a
// denied job or item budget).
type FailureAction struct {
	// Action is messages.OnFailureStop (the item fails), OnFailureContinue
	// (the item goes on with the next step) or OnFailureFallback.
	Action string
	// Fallback is the command run for OnFailureFallback.
	Fallback string
}

// NewFailureAction checks and converts an on_failure value; nil means stop.
func NewFailureAction(of *messages.OnFailure) (FailureAction, error) {
	if of == nil {
		return FailureAction{Action: messages.OnFailureStop}, nil
	}
	switch of.Action {
	case "", messages.OnFailureStop:
		return FailureAction{Action: messages.OnFailureStop}, nil
	case messages.OnFailureContinue:
		return FailureAction{Action: messages.OnFailureContinue}, nil
	case messages.OnFailureFallback:
		if of.Fallback == "" {
			return FailureAction{Action: messages.OnFailureStop}, problem("fallback needs a command")
		}
		return FailureAction{Action: messages.OnFailureFallback, Fallback: of.Fallback}, nil
	}
	return FailureAction{Action: messages.OnFailureStop}, problem("unknown action %q (want stop, continue or {fallback: {command}})", of.Action)
}

// StepOutcome is what becomes of a step that gave up, after its on_failure.
type StepOutcome int

// Step outcomes.
const (
	// StepFailed: the item fails; the workflow error policy takes over.
	StepFailed StepOutcome = iota
	// StepContinue: the step stays failed (recorded in the history) and the
	// item goes on with its next step.
	StepContinue
	// StepSucceeded: the fallback command succeeded; it counts as the
	// step's success and its output as the step's output.
	StepSucceeded
)

func (o StepOutcome) String() string {
	switch o {
	case StepFailed:
		return "failed"
	case StepContinue:
		return "continue"
	case StepSucceeded:
		return "succeeded"
	}
	return fmt.Sprintf("StepOutcome(%d)", int(o))
}

// NeedsFallback reports whether the agent must run a.Fallback before it can
// call [FailureAction.Outcome].
func (a FailureAction) NeedsFallback() bool { return a.Action == messages.OnFailureFallback }

// Outcome is what follows a give-up. fallbackErr is the result of the
// fallback command (only read for fallback): nil makes the step a success,
// an error makes the item fail (the caller keeps both errors, e.g. with
// errors.Join, for the history).
func (a FailureAction) Outcome(fallbackErr error) StepOutcome {
	switch a.Action {
	case messages.OnFailureContinue:
		return StepContinue
	case messages.OnFailureFallback:
		if fallbackErr == nil {
			return StepSucceeded
		}
	}
	return StepFailed
}
