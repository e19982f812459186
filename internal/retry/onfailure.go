package retry

import (
	"time"

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
	// FailAfter: the step fails after its fallback runs, whatever the
	// fallback's outcome (messages.OnFailure.FailWorkflow).
	FailAfter bool
	// Runs is how many times the step may run in one delivery, the
	// fallback after each failed run (messages.OnFailure.MaxAttempts): 1
	// runs the fallback only when the step gives up.
	Runs int
	// HandlerFatal: a fallback that fails between runs ends them, and
	// the step gives up (messages.OnFailure.HandlerFailureFatal).
	HandlerFatal bool
	// Timeout bounds each run of the fallback; zero: the step's timeout.
	Timeout time.Duration
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
		if of.Fallback == "" && len(of.Steps) == 0 {
			return FailureAction{Action: messages.OnFailureStop}, problem("fallback needs a command")
		}
		return FailureAction{Action: messages.OnFailureFallback, Fallback: of.Fallback, FailAfter: of.FailWorkflow,
			Runs: max(of.MaxAttempts, 1), HandlerFatal: of.HandlerFailureFatal, Timeout: of.Timeout.D()}, nil
	}
	return FailureAction{Action: messages.OnFailureStop}, problem("unknown action %q (want stop, continue or {fallback: {command}})", of.Action)
}

// NeedsFallback reports whether the agent must run a.Fallback before it can
// decide what follows the give-up (the agent's End.OnFailure).
func (a FailureAction) NeedsFallback() bool { return a.Action == messages.OnFailureFallback }

// Reruns reports whether a failed run of the step is followed, in the same
// delivery, by the fallback and another run (a.Runs above 1).
func (a FailureAction) Reruns() bool { return a.NeedsFallback() && a.Runs > 1 }
