package envflag

import (
	"flag"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// Policy reads the operator's AD-44 settings, the one place the binaries
// that host a coordinator (cmd/coordinator, fleetctl run) take them from:
// the retry budget (RETRY_BUDGET_DEFAULT, _MAX, _PER_ITEM_DEFAULT,
// _PER_ITEM_MAX or AD-44's _PER_WORKFLOW_ names, _PROFILE) into b, and the
// best-effort defaults (BEST_EFFORT_MIN_GROUPS_DEFAULT,
// BEST_EFFORT_DEADLINE_DEFAULT, _MAX, or AD-44's BEST_EFFORT_DEFAULT_MIN_DCS
// and BEST_EFFORT_DEFAULT_DEADLINE_SECONDS) into be, through getenv. It
// then registers their flags on fs, which override the environment when fs
// is parsed (their bounds are checked by the coordinator's Config.Validate).
// A malformed variable is an error that names it.
func Policy(fs *flag.FlagSet, getenv func(string) string, b *budget.Settings, be *jobspec.BestEffortSettings) error {
	bs, err := budget.SettingsFromEnv(getenv)
	if err != nil {
		return err
	}
	bes, err := BestEffortFromEnv(getenv)
	if err != nil {
		return err
	}
	*b, *be = bs, bes
	budget.RegisterFlags(fs, b)
	RegisterBestEffort(fs, be)
	return nil
}
