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

// Operator settings keep AD-44's names, as environment variables and, in
// lower case with dashes, as flags.
const (
	EnvDefault        = "RETRY_BUDGET_DEFAULT"
	EnvMax            = "RETRY_BUDGET_MAX"
	EnvPerItemDefault = "RETRY_BUDGET_PER_ITEM_DEFAULT"
	EnvPerItemMax     = "RETRY_BUDGET_PER_ITEM_MAX"

	FlagDefault        = "retry-budget-default"
	FlagMax            = "retry-budget-max"
	FlagPerItemDefault = "retry-budget-per-item-default"
	FlagPerItemMax     = "retry-budget-per-item-max"
)

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

// Settings are the operator's retry-budget settings (AD-44). Every field is
// a count or a percentage of the job's items; nil means "not set". The zero
// value is the out-of-the-box behaviour. A Settings value is immutable once
// in use and safe to share between goroutines.
type Settings struct {
	// Default is the job budget when a spec sets no retry_budget.
	// Defaults to max(20, 10% of the items).
	Default *messages.BudgetValue
	// Max caps every job budget. Defaults to no cap.
	Max *messages.BudgetValue
	// PerItemDefault caps each item when a spec sets no
	// retry_budget_per_item. Defaults to no per-item cap: the step's
	// attempts bound an item.
	PerItemDefault *messages.BudgetValue
	// PerItemMax caps every per-item budget. Defaults to no cap.
	PerItemMax *messages.BudgetValue
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

// SettingsFromEnv reads the four AD-44 variables through getenv (os.Getenv
// when nil). Unset or empty variables keep the out-of-the-box behaviour.
// Every malformed variable is reported, by name, in one error.
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
		*f.p = v
	}
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
// -retry-budget-per-item-max, each writing into s. Load s from the
// environment first to let flags override it, and call s.Validate after
// fs.Parse.
func RegisterFlags(fs *flag.FlagSet, s *Settings) {
	for _, f := range s.fields() {
		fs.Var(valueFlag{f.p}, f.flag, f.usage+" (env "+f.env+")")
	}
}

// Validate reports negative or non-finite values, and a default above its
// maximum when both are counts or both are percentages.
func (s Settings) Validate() error {
	var errs []error
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

// String renders the settings as their environment assignments.
func (s Settings) String() string {
	parts := make([]string, 0, 4)
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
}

func (s *Settings) fields() []settingField {
	return []settingField{
		{p: &s.Default, env: EnvDefault, flag: FlagDefault,
			usage: "job retry budget when a spec sets none: a count or a percentage of the items (default max(20, 10%))"},
		{p: &s.Max, env: EnvMax, flag: FlagMax,
			usage: "cap on every job retry budget: a count or a percentage of the items (default no cap)"},
		{p: &s.PerItemDefault, env: EnvPerItemDefault, flag: FlagPerItemDefault,
			usage: "per-item retry cap when a spec sets none (default none: the step's attempts bound an item)"},
		{p: &s.PerItemMax, env: EnvPerItemMax, flag: FlagPerItemMax,
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
