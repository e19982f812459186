package envflag

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Policy reads AD-44's names and jetfleet's, and the flags override them.
func TestPolicy(t *testing.T) {
	env := map[string]string{
		"RETRY_BUDGET_PER_WORKFLOW_DEFAULT": "2", "RETRY_BUDGET_PER_WORKFLOW_MAX": "2", "RETRY_BUDGET_DEFAULT": "30",
		"BEST_EFFORT_DEFAULT_MIN_DCS": "2", "BEST_EFFORT_DEFAULT_DEADLINE_SECONDS": "90",
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var b budget.Settings
	var be jobspec.BestEffortSettings
	require.NoError(t, Policy(fs, func(k string) string { return env[k] }, &b, &be))
	require.NoError(t, fs.Parse([]string{"--retry-budget-default", "40"}))
	require.Equal(t, &messages.BudgetValue{Count: 40}, b.Default, "the flag over the variable")
	require.Equal(t, &messages.BudgetValue{Count: 2}, b.PerItemDefault)
	require.Equal(t, &messages.BudgetValue{Count: 2}, b.PerItemMax)
	require.Equal(t, jobspec.BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 90 * time.Second}, be)

	env = map[string]string{"RETRY_BUDGET_PER_WORKFLOW_MAX": "x"}
	err := Policy(flag.NewFlagSet("t", flag.ContinueOnError), func(k string) string { return env[k] }, &b, &be)
	require.ErrorContains(t, err, "RETRY_BUDGET_PER_WORKFLOW_MAX")
}
