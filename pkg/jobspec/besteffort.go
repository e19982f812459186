package jobspec

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
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

// BestEffortSettingsFromEnv reads BEST_EFFORT_MIN_GROUPS_DEFAULT,
// BEST_EFFORT_DEADLINE_DEFAULT (a duration, "5m") and
// BEST_EFFORT_DEADLINE_MAX through getenv (os.Getenv when nil), and
// AD-44's names BEST_EFFORT_DEFAULT_MIN_DCS and
// BEST_EFFORT_DEFAULT_DEADLINE_SECONDS (seconds, "300.0") as aliases.
// Unset or empty variables keep the defaults. Every malformed variable,
// and a name and its alias that disagree, is reported by name in one
// error.
func BestEffortSettingsFromEnv(getenv func(string) string) (BestEffortSettings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var s BestEffortSettings
	var errs []error
	both := func(name, alias string, v, a int64, vok, aok bool, show func(int64) string) (int64, bool) {
		if vok && aok && v != a {
			errs = append(errs, fmt.Errorf("jobspec: %s (%s) and its alias %s (%s) disagree", name, show(v), alias, show(a)))
			return 0, false
		}
		if vok {
			return v, true
		}
		return a, aok
	}
	count := func(name string) (int64, bool) {
		raw := strings.TrimSpace(getenv(name))
		if raw == "" {
			return 0, false
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("jobspec: %s: %q is not a number of groups >= 1", name, raw))
			return 0, false
		}
		return int64(n), true
	}
	duration := func(name string) (int64, bool) {
		raw := strings.TrimSpace(getenv(name))
		if raw == "" {
			return 0, false
		}
		d, err := messages.ParseDuration(raw)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("jobspec: %s: %q is not a duration greater than 0 (e.g. 5m)", name, raw))
			return 0, false
		}
		return int64(d), true
	}
	seconds := func(name string) (int64, bool) {
		raw := strings.TrimSpace(getenv(name))
		if raw == "" {
			return 0, false
		}
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || !(f > 0) || f > math.MaxInt64/float64(time.Second) {
			errs = append(errs, fmt.Errorf("jobspec: %s: %q is not a number of seconds greater than 0 (e.g. 300.0)", name, raw))
			return 0, false
		}
		return int64(math.Round(f * float64(time.Second))), true
	}
	showDur := func(n int64) string { return messages.Duration(n).String() }
	showInt := func(n int64) string { return strconv.FormatInt(n, 10) }

	v, vok := count(EnvBestEffortMinGroupsDefault)
	a, aok := count(EnvBestEffortMinDCs)
	if n, ok := both(EnvBestEffortMinGroupsDefault, EnvBestEffortMinDCs, v, a, vok, aok, showInt); ok {
		s.MinGroupsDefault = int(min(n, math.MaxInt32))
	}
	v, vok = duration(EnvBestEffortDeadlineDefault)
	a, aok = seconds(EnvBestEffortDeadlineSeconds)
	if d, ok := both(EnvBestEffortDeadlineDefault, EnvBestEffortDeadlineSeconds, v, a, vok, aok, showDur); ok {
		s.DeadlineDefault = time.Duration(d)
	}
	if d, ok := duration(EnvBestEffortDeadlineMax); ok {
		s.DeadlineMax = time.Duration(d)
	}
	if err := errors.Join(errs...); err != nil {
		return BestEffortSettings{}, err
	}
	if err := s.Validate(); err != nil {
		return BestEffortSettings{}, err
	}
	return s, nil
}

// RegisterBestEffortFlags adds the three settings to fs as
// -best-effort-min-groups-default, -best-effort-deadline-default and
// -best-effort-deadline-max, each writing into s. Load s from the
// environment first to let flags override it, and call s.Validate after
// fs.Parse.
func RegisterBestEffortFlags(fs *flag.FlagSet, s *BestEffortSettings) {
	fs.IntVar(&s.MinGroupsDefault, FlagBestEffortMinGroupsDefault, s.MinGroupsDefault,
		"best_effort.min_groups of a job that sets none (default 1; env "+EnvBestEffortMinGroupsDefault+")")
	// messages.Duration reads and writes humantime ("5m") as text.
	fs.TextVar((*messages.Duration)(&s.DeadlineDefault), FlagBestEffortDeadlineDefault, messages.Duration(s.DeadlineDefault),
		"best_effort.deadline of a job that sets none (default 5m; env "+EnvBestEffortDeadlineDefault+")")
	fs.TextVar((*messages.Duration)(&s.DeadlineMax), FlagBestEffortDeadlineMax, messages.Duration(s.DeadlineMax),
		"cap on every best_effort.deadline (default no cap; env "+EnvBestEffortDeadlineMax+")")
}
