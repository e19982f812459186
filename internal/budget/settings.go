package budget

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Operator settings keep the names of AD-44 (the architecture decision on
// job-level retry budgets and best-effort completion that jetfleet
// implements), as environment variables and, in lower case with dashes, as
// flags.
const (
	EnvDefault        = "RETRY_BUDGET_DEFAULT"
	EnvMax            = "RETRY_BUDGET_MAX"
	EnvPerItemDefault = "RETRY_BUDGET_PER_ITEM_DEFAULT"
	EnvPerItemMax     = "RETRY_BUDGET_PER_ITEM_MAX"
	// EnvProfile names a set of defaults for the four settings (Profile).
	EnvProfile = "RETRY_BUDGET_PROFILE"

	FlagDefault        = "retry-budget-default"
	FlagMax            = "retry-budget-max"
	FlagPerItemDefault = "retry-budget-per-item-default"
	FlagPerItemMax     = "retry-budget-per-item-max"
	FlagProfile        = "retry-budget-profile"
)

// AD-44 calls an item a workflow: its names of the per-item settings are
// aliases of ours, as environment variables and as flags. Setting a name
// and its alias to different values is an error.
const (
	EnvPerWorkflowDefault = "RETRY_BUDGET_PER_WORKFLOW_DEFAULT"
	EnvPerWorkflowMax     = "RETRY_BUDGET_PER_WORKFLOW_MAX"

	FlagPerWorkflowDefault = "retry-budget-per-workflow-default"
	FlagPerWorkflowMax     = "retry-budget-per-workflow-max"
)

// Profiles: named sets of defaults for the settings an operator leaves
// unset (Settings.Profile).
const (
	// ProfileDefault is the out-of-the-box behaviour: a job budget of
	// max(20, 10% of the items), no per-item default, no maxima.
	ProfileDefault = "default"
	// ProfileAD44 is AD-44's deployment: 20 / 50 / 3 / 5 (AD44Settings).
	ProfileAD44 = "ad44"
)

// ErrUnknownProfile is returned for a profile name other than
// ProfileDefault and ProfileAD44.
var ErrUnknownProfile = errors.New("budget: unknown profile")

// The built-in job default, used when neither the spec nor the operator
// sets a budget: max(BuiltinDefaultFloor, BuiltinDefaultPercent% of the
// job's items).
const (
	BuiltinDefaultFloor   = 20
	BuiltinDefaultPercent = 10.0
)

// MaxUnits bounds any resolved budget, so that percentages of huge jobs
// stay representable.
const MaxUnits = math.MaxInt32

// Settings are the operator's retry-budget settings. Every field is a
// count or a percentage of the job's items; nil means "not set". The zero
// value is the out-of-the-box behaviour. A Settings value is immutable once
// in use and safe to share between goroutines. Its fields are
// pkg/coordinator's BudgetSettings's, documented there for users
// (Config.Budget; the profiles are ProfileDefault and ProfileAD44): the
// coordinator converts one into the other with a struct conversion, which
// compiles only while both have the same fields, of the same types, in the
// same order. Add a field to both.
type Settings struct {
	Default        *messages.BudgetValue
	Max            *messages.BudgetValue
	PerItemDefault *messages.BudgetValue
	PerItemMax     *messages.BudgetValue
	Profile        string
}

// profile returns the named profile's settings.
func profile(name string) (Settings, error) {
	switch name {
	case "", ProfileDefault:
		return Settings{}, nil
	case ProfileAD44:
		return AD44Settings(), nil
	}
	return Settings{}, fmt.Errorf("%w %q (want %s or %s)", ErrUnknownProfile, name, ProfileDefault, ProfileAD44)
}

// Resolved returns s with the fields it leaves unset taken from its
// Profile: the settings Effective applies. An unknown profile adds
// nothing (Validate reports it).
func (s Settings) Resolved() Settings {
	p, err := profile(s.Profile)
	if err != nil {
		return s
	}
	out := s
	for i, f := range out.fields() {
		if *f.p == nil {
			*f.p = *p.fields()[i].p
		}
	}
	return out
}

// AD44Settings is the AD-44 deployment profile: job default 20, job max 50,
// per-item default 3, per-item max 5.
func AD44Settings() Settings {
	return Settings{Default: Count(20), Max: Count(50), PerItemDefault: Count(3), PerItemMax: Count(5)}
}

// Count is a budget value of n retries.
func Count(n int) *messages.BudgetValue { return &messages.BudgetValue{Count: n} }

// Percent is a budget value of p percent of the job's items.
func Percent(p float64) *messages.BudgetValue {
	return &messages.BudgetValue{Percent: p, IsPercent: true}
}

// ParseValue parses "20" or "10%" (surrounding blanks ignored). The empty
// string means "not set" and yields nil.
func ParseValue(s string) (*messages.BudgetValue, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%q is not a percentage (e.g. \"10%%\")", s)
		}
		if f < 0 {
			return nil, fmt.Errorf("%q is negative", s)
		}
		return Percent(f), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a count or a percentage (e.g. 20 or \"10%%\")", s)
	}
	if n < 0 {
		return nil, fmt.Errorf("%q is negative", s)
	}
	return Count(n), nil
}

// FormatValue is the inverse of ParseValue: "20", "10%", or "" for nil.
func FormatValue(v *messages.BudgetValue) string {
	switch {
	case v == nil:
		return ""
	case v.IsPercent:
		return strconv.FormatFloat(v.Percent, 'f', -1, 64) + "%"
	default:
		return strconv.Itoa(v.Count)
	}
}

// SettingsFromEnv reads the four AD-44 variables, the aliases
// RETRY_BUDGET_PER_WORKFLOW_DEFAULT and _MAX, and RETRY_BUDGET_PROFILE
// through getenv (os.Getenv when nil). Unset or empty variables keep the
// profile's value (by default the out-of-the-box behaviour). Every
// malformed variable, and a name and its alias set to different values, is
// reported, by name, in one error.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var s Settings
	var errs []error
	for _, f := range s.fields() {
		v, err := ParseValue(getenv(f.env))
		if err != nil {
			errs = append(errs, fmt.Errorf("budget: %s: %w", f.env, err))
			continue
		}
		if f.aliasEnv != "" {
			a, err := ParseValue(getenv(f.aliasEnv))
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("budget: %s: %w", f.aliasEnv, err))
				continue
			case a != nil && v != nil && *a != *v:
				errs = append(errs, fmt.Errorf("budget: %s (%s) and its alias %s (%s) disagree", f.env, FormatValue(v), f.aliasEnv, FormatValue(a)))
				continue
			case v == nil:
				v = a
			}
		}
		*f.p = v
	}
	s.Profile = strings.TrimSpace(getenv(EnvProfile))
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// RegisterFlags adds the four settings to fs as -retry-budget-default,
// -retry-budget-max, -retry-budget-per-item-default and
// -retry-budget-per-item-max (with the aliases
// -retry-budget-per-workflow-default and -retry-budget-per-workflow-max),
// and -retry-budget-profile, each writing into s. Load s from the
// environment first to let flags override it, and call s.Validate after
// fs.Parse.
func RegisterFlags(fs *flag.FlagSet, s *Settings) {
	for _, f := range s.fields() {
		fs.Var(valueFlag{f.p}, f.flag, f.usage+" (env "+f.env+")")
		if f.aliasFlag != "" {
			fs.Var(valueFlag{f.p}, f.aliasFlag, "alias of --"+f.flag+", its name in AD-44, the architecture decision on job retry budgets (env "+f.aliasEnv+")")
		}
	}
	fs.Var(profileFlag{&s.Profile}, FlagProfile, "defaults of the settings above that are not set: "+ProfileAD44+
		" (20, 50, 3 and 5, as AD-44, the architecture decision on job retry budgets, deploys them) or "+ProfileDefault+" (env "+EnvProfile+")")
}

// Validate reports an unknown profile, negative or non-finite values, and
// a default above its maximum (the profile's values included) when both
// are counts or both are percentages.
func (s Settings) Validate() error {
	var errs []error
	if _, err := profile(s.Profile); err != nil {
		errs = append(errs, fmt.Errorf("%w (%s)", err, EnvProfile))
	}
	s = s.Resolved()
	for _, f := range s.fields() {
		v := *f.p
		if v == nil {
			continue
		}
		if v.IsPercent && (v.Percent < 0 || math.IsNaN(v.Percent) || math.IsInf(v.Percent, 0)) ||
			!v.IsPercent && v.Count < 0 {
			errs = append(errs, fmt.Errorf("budget: %s: %q must be a non-negative count or percentage", f.env, FormatValue(v)))
		}
	}
	check := func(def, max *messages.BudgetValue, defName, maxName string) {
		if def == nil || max == nil || def.IsPercent != max.IsPercent {
			return
		}
		if def.IsPercent && def.Percent > max.Percent || !def.IsPercent && def.Count > max.Count {
			errs = append(errs, fmt.Errorf("budget: %s (%s) exceeds %s (%s)", defName, FormatValue(def), maxName, FormatValue(max)))
		}
	}
	check(s.Default, s.Max, EnvDefault, EnvMax)
	check(s.PerItemDefault, s.PerItemMax, EnvPerItemDefault, EnvPerItemMax)
	return errors.Join(errs...)
}

// String renders the settings as their environment assignments, the
// profile's values filled in.
func (s Settings) String() string {
	parts := make([]string, 0, 5)
	if s.Profile != "" {
		parts = append(parts, EnvProfile+"="+s.Profile)
	}
	s = s.Resolved()
	for _, f := range s.fields() {
		v := FormatValue(*f.p)
		if v == "" {
			v = "unset"
		}
		parts = append(parts, f.env+"="+v)
	}
	return strings.Join(parts, " ")
}

type settingField struct {
	p                **messages.BudgetValue
	env, flag, usage string
	// aliasEnv and aliasFlag are AD-44's names of the setting, if any.
	aliasEnv, aliasFlag string
}

func (s *Settings) fields() []settingField {
	return []settingField{
		{p: &s.Default, env: EnvDefault, flag: FlagDefault,
			usage: "job retry budget when a spec sets none: a count or a percentage of the items (default max(20, 10%))"},
		{p: &s.Max, env: EnvMax, flag: FlagMax,
			usage: "cap on every job retry budget: a count or a percentage of the items (default no cap)"},
		{p: &s.PerItemDefault, env: EnvPerItemDefault, flag: FlagPerItemDefault,
			aliasEnv: EnvPerWorkflowDefault, aliasFlag: FlagPerWorkflowDefault,
			usage: "per-item retry cap when a spec sets none (default none: the step's attempts bound an item)"},
		{p: &s.PerItemMax, env: EnvPerItemMax, flag: FlagPerItemMax,
			aliasEnv: EnvPerWorkflowMax, aliasFlag: FlagPerWorkflowMax,
			usage: "cap on every per-item retry budget (default no cap)"},
	}
}

// valueFlag is a flag.Value over a *messages.BudgetValue field.
type valueFlag struct{ p **messages.BudgetValue }

func (f valueFlag) String() string {
	if f.p == nil {
		return ""
	}
	return FormatValue(*f.p)
}

func (f valueFlag) Set(s string) error {
	v, err := ParseValue(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}

// profileFlag is a flag.Value over Settings.Profile that takes only a known
// profile.
type profileFlag struct{ p *string }

func (f profileFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f profileFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	if _, err := profile(s); err != nil {
		return err
	}
	*f.p = s
	return nil
}
