package envflag

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// BestEffortFromEnv reads BEST_EFFORT_MIN_GROUPS_DEFAULT,
// BEST_EFFORT_DEADLINE_DEFAULT (a duration, "5m") and
// BEST_EFFORT_DEADLINE_MAX through getenv (os.Getenv when nil), and
// AD-44's names BEST_EFFORT_DEFAULT_MIN_DCS and
// BEST_EFFORT_DEFAULT_DEADLINE_SECONDS (seconds, "300.0") as aliases.
// Unset or empty variables keep the defaults. Every malformed variable,
// and a name and its alias that disagree, is reported by name in one
// error.
func BestEffortFromEnv(getenv func(string) string) (jobspec.BestEffortSettings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var s jobspec.BestEffortSettings
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

	v, vok := count(jobspec.EnvBestEffortMinGroupsDefault)
	a, aok := count(jobspec.EnvBestEffortMinDCs)
	if n, ok := both(jobspec.EnvBestEffortMinGroupsDefault, jobspec.EnvBestEffortMinDCs, v, a, vok, aok, showInt); ok {
		s.MinGroupsDefault = int(min(n, math.MaxInt32))
	}
	v, vok = duration(jobspec.EnvBestEffortDeadlineDefault)
	a, aok = seconds(jobspec.EnvBestEffortDeadlineSeconds)
	if d, ok := both(jobspec.EnvBestEffortDeadlineDefault, jobspec.EnvBestEffortDeadlineSeconds, v, a, vok, aok, showDur); ok {
		s.DeadlineDefault = time.Duration(d)
	}
	if d, ok := duration(jobspec.EnvBestEffortDeadlineMax); ok {
		s.DeadlineMax = time.Duration(d)
	}
	if err := errors.Join(errs...); err != nil {
		return jobspec.BestEffortSettings{}, err
	}
	if err := s.Validate(); err != nil {
		return jobspec.BestEffortSettings{}, err
	}
	return s, nil
}

// RegisterBestEffort adds the three settings to fs as
// -best-effort-min-groups-default, -best-effort-deadline-default and
// -best-effort-deadline-max, each writing into s. Load s from the
// environment first to let flags override it, and call s.Validate after
// fs.Parse.
func RegisterBestEffort(fs *flag.FlagSet, s *jobspec.BestEffortSettings) {
	fs.IntVar(&s.MinGroupsDefault, jobspec.FlagBestEffortMinGroupsDefault, s.MinGroupsDefault,
		"best_effort.min_groups of a job that sets none (default 1; env "+jobspec.EnvBestEffortMinGroupsDefault+")")
	// messages.Duration reads and writes humantime ("5m") as text.
	fs.TextVar((*messages.Duration)(&s.DeadlineDefault), jobspec.FlagBestEffortDeadlineDefault, messages.Duration(s.DeadlineDefault),
		"best_effort.deadline of a job that sets none (default 5m; env "+jobspec.EnvBestEffortDeadlineDefault+")")
	fs.TextVar((*messages.Duration)(&s.DeadlineMax), jobspec.FlagBestEffortDeadlineMax, messages.Duration(s.DeadlineMax),
		"cap on every best_effort.deadline (default no cap; env "+jobspec.EnvBestEffortDeadlineMax+")")
}
