package jobspec

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The operator's best-effort settings (AD-44, the architecture decision on
// job-level retry budgets and best-effort completion that jetfleet
// implements, names them BEST_EFFORT_DEFAULT_MIN_DCS
// and BEST_EFFORT_DEFAULT_DEADLINE_SECONDS, over groups instead of
// datacenters), as environment variables and, in lower case with dashes,
// as flags.
const (
	EnvBestEffortMinGroupsDefault = "BEST_EFFORT_MIN_GROUPS_DEFAULT"
	EnvBestEffortDeadlineDefault  = "BEST_EFFORT_DEADLINE_DEFAULT"
	EnvBestEffortDeadlineMax      = "BEST_EFFORT_DEADLINE_MAX"

	FlagBestEffortMinGroupsDefault = "best-effort-min-groups-default"
	FlagBestEffortDeadlineDefault  = "best-effort-deadline-default"
	FlagBestEffortDeadlineMax      = "best-effort-deadline-max"

	// AD-44's own names, accepted as aliases: a count of groups, and a
	// number of seconds.
	EnvBestEffortMinDCs          = "BEST_EFFORT_DEFAULT_MIN_DCS"
	EnvBestEffortDeadlineSeconds = "BEST_EFFORT_DEFAULT_DEADLINE_SECONDS"
)

// DefaultBestEffortDeadline is a best_effort block's deadline when neither
// the spec nor the operator sets one: AD-44's 300 seconds.
const DefaultBestEffortDeadline = 5 * time.Minute

// ClampedByDeadlineMax is what BestEffortSettings.Apply names when the
// operator's maximum lowered a requested deadline.
const ClampedByDeadlineMax = EnvBestEffortDeadlineMax

// BestEffortSettings are the operator's defaults and bounds for the
// best_effort block of a job (docs/jobs.md): what a block that sets no
// min_groups or no deadline gets, and the longest deadline a job may ask
// for. The zero value is the out-of-the-box behaviour; a value is
// immutable once in use and safe to share.
type BestEffortSettings struct {
	// MinGroupsDefault is min_groups when a best_effort block sets none.
	// Defaults to 1.
	MinGroupsDefault int
	// DeadlineDefault is the deadline when a best_effort block sets none.
	// Defaults to 5m (AD-44's 300 s).
	DeadlineDefault time.Duration
	// DeadlineMax caps every deadline, the requested ones included (the
	// job's status records the clamp). 0 = no cap.
	DeadlineMax time.Duration
}

// WithDefaults returns s with its zero fields set to their defaults.
func (s BestEffortSettings) WithDefaults() BestEffortSettings {
	if s.MinGroupsDefault == 0 {
		s.MinGroupsDefault = messages.DefaultMinGroups
	}
	if s.DeadlineDefault == 0 {
		s.DeadlineDefault = DefaultBestEffortDeadline
	}
	return s
}

// Validate reports every invalid field of s (after WithDefaults): a
// negative value, and a default deadline above the maximum.
func (s BestEffortSettings) Validate() error {
	var errs []error
	if s.MinGroupsDefault < 0 {
		errs = append(errs, fmt.Errorf("jobspec: %s: must be >= 1, got %d", EnvBestEffortMinGroupsDefault, s.MinGroupsDefault))
	}
	if s.DeadlineDefault < 0 {
		errs = append(errs, fmt.Errorf("jobspec: %s: must be greater than 0, got %s", EnvBestEffortDeadlineDefault, messages.Duration(s.DeadlineDefault)))
	}
	if s.DeadlineMax < 0 {
		errs = append(errs, fmt.Errorf("jobspec: %s: must not be negative (0 = no cap), got %s", EnvBestEffortDeadlineMax, messages.Duration(s.DeadlineMax)))
	}
	if d := s.WithDefaults().DeadlineDefault; s.DeadlineMax > 0 && d > s.DeadlineMax {
		errs = append(errs, fmt.Errorf("jobspec: %s (%s) exceeds %s (%s)", EnvBestEffortDeadlineDefault, messages.Duration(d),
			EnvBestEffortDeadlineMax, messages.Duration(s.DeadlineMax)))
	}
	return errors.Join(errs...)
}

// Apply completes eff, the effective best_effort block of a job (from
// WithDefaults), from requested, the block as submitted: an unset
// min_groups or deadline takes the operator's default, and a deadline
// above DeadlineMax is lowered to it. It returns what clamped a requested
// value (ClampedByDeadlineMax, or ""). Either block nil: nothing to do.
func (s BestEffortSettings) Apply(requested, eff *messages.BestEffort) (clampedBy string) {
	if requested == nil || eff == nil {
		return ""
	}
	s = s.WithDefaults()
	if requested.MinGroups == 0 {
		eff.MinGroups = s.MinGroupsDefault
	}
	if requested.Deadline == 0 {
		eff.Deadline = messages.Duration(s.DeadlineDefault)
	}
	if s.DeadlineMax > 0 && eff.Deadline.D() > s.DeadlineMax {
		eff.Deadline = messages.Duration(s.DeadlineMax)
		if requested.Deadline != 0 {
			clampedBy = ClampedByDeadlineMax
		}
	}
	return clampedBy
}
