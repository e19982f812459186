package budget_test

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    *messages.BudgetValue
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "20", want: budget.Count(20)},
		{in: " 0 ", want: budget.Count(0)},
		{in: "10%", want: budget.Percent(10)},
		{in: "2.5 %", want: budget.Percent(2.5)},
		{in: "-1", wantErr: true},
		{in: "-5%", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "10%%", wantErr: true},
		{in: "NaN%", wantErr: true},
		{in: "1.5", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := budget.ParseValue(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			if got != nil {
				again, err := budget.ParseValue(budget.FormatValue(got))
				require.NoError(t, err)
				require.Equal(t, got, again)
			}
		})
	}
}

func TestSettingsFromEnv(t *testing.T) {
	s, err := budget.SettingsFromEnv(getenv(nil))
	require.NoError(t, err)
	require.Equal(t, budget.Settings{}, s, "nothing set: out-of-the-box behaviour")

	s, err = budget.SettingsFromEnv(getenv(map[string]string{
		"RETRY_BUDGET_DEFAULT": "20", "RETRY_BUDGET_MAX": "50",
		"RETRY_BUDGET_PER_ITEM_DEFAULT": "3", "RETRY_BUDGET_PER_ITEM_MAX": "5",
	}))
	require.NoError(t, err)
	require.Equal(t, budget.AD44Settings(), s)
	require.Equal(t, "RETRY_BUDGET_DEFAULT=20 RETRY_BUDGET_MAX=50 RETRY_BUDGET_PER_ITEM_DEFAULT=3 RETRY_BUDGET_PER_ITEM_MAX=5", s.String())

	s, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_DEFAULT": "10%"}))
	require.NoError(t, err)
	require.Equal(t, budget.Percent(10), s.Default)

	// Every malformed variable is named, in one error.
	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_MAX": "lots", "RETRY_BUDGET_PER_ITEM_MAX": "-2"}))
	require.ErrorContains(t, err, `RETRY_BUDGET_MAX: "lots" is not a count or a percentage`)
	require.ErrorContains(t, err, `RETRY_BUDGET_PER_ITEM_MAX: "-2" is negative`)

	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_DEFAULT": "60", "RETRY_BUDGET_MAX": "50"}))
	require.EqualError(t, err, "budget: RETRY_BUDGET_DEFAULT (60) exceeds RETRY_BUDGET_MAX (50)")
	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PER_ITEM_DEFAULT": "6", "RETRY_BUDGET_PER_ITEM_MAX": "5"}))
	require.EqualError(t, err, "budget: RETRY_BUDGET_PER_ITEM_DEFAULT (6) exceeds RETRY_BUDGET_PER_ITEM_MAX (5)")
}

func TestSettingsValidate(t *testing.T) {
	require.NoError(t, budget.Settings{}.Validate())
	require.NoError(t, budget.AD44Settings().Validate())
	require.Error(t, budget.Settings{Max: budget.Count(-1)}.Validate())
	require.Error(t, budget.Settings{Default: budget.Percent(20), Max: budget.Percent(10)}.Validate())
	// A count default against a percentage max can only be checked per job.
	require.NoError(t, budget.Settings{Default: budget.Count(200), Max: budget.Percent(10)}.Validate())
}

func TestRegisterFlags(t *testing.T) {
	s, err := budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_DEFAULT": "20", "RETRY_BUDGET_MAX": "50"}))
	require.NoError(t, err)
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	budget.RegisterFlags(fs, &s)

	require.Equal(t, "50", fs.Lookup("retry-budget-max").Value.String(), "flags show the env value")
	require.Contains(t, fs.Lookup("retry-budget-max").Usage, "RETRY_BUDGET_MAX")
	require.NoError(t, fs.Parse([]string{"-retry-budget-max=80", "-retry-budget-per-item-default", "3", "-retry-budget-per-item-max=5%"}))
	require.NoError(t, s.Validate())
	require.Equal(t, budget.Settings{Default: budget.Count(20), Max: budget.Count(80),
		PerItemDefault: budget.Count(3), PerItemMax: budget.Percent(5)}, s)

	err = fs.Parse([]string{"-retry-budget-default=x"})
	require.ErrorContains(t, err, "retry-budget-default")
}

// AD-44 names the per-item settings per workflow: RETRY_BUDGET_PER_WORKFLOW_*
// are aliases, as environment variables and flags.
func TestSettingsAD44Aliases(t *testing.T) {
	s, err := budget.SettingsFromEnv(getenv(map[string]string{
		"RETRY_BUDGET_PER_WORKFLOW_DEFAULT": "3", "RETRY_BUDGET_PER_WORKFLOW_MAX": "5",
	}))
	require.NoError(t, err)
	require.Equal(t, budget.Settings{PerItemDefault: budget.Count(3), PerItemMax: budget.Count(5)}, s)

	// Both names with the same value are fine; different values are refused.
	s, err = budget.SettingsFromEnv(getenv(map[string]string{
		"RETRY_BUDGET_PER_ITEM_MAX": "5", "RETRY_BUDGET_PER_WORKFLOW_MAX": "5",
	}))
	require.NoError(t, err)
	require.Equal(t, budget.Count(5), s.PerItemMax)
	_, err = budget.SettingsFromEnv(getenv(map[string]string{
		"RETRY_BUDGET_PER_ITEM_DEFAULT": "3", "RETRY_BUDGET_PER_WORKFLOW_DEFAULT": "4",
	}))
	require.EqualError(t, err, "budget: RETRY_BUDGET_PER_ITEM_DEFAULT (3) and its alias RETRY_BUDGET_PER_WORKFLOW_DEFAULT (4) disagree")
	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PER_WORKFLOW_MAX": "many"}))
	require.ErrorContains(t, err, `RETRY_BUDGET_PER_WORKFLOW_MAX: "many" is not a count`)

	s = budget.Settings{}
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	budget.RegisterFlags(fs, &s)
	require.NoError(t, fs.Parse([]string{"--retry-budget-per-workflow-default=2", "--retry-budget-per-workflow-max", "4"}))
	require.Equal(t, budget.Settings{PerItemDefault: budget.Count(2), PerItemMax: budget.Count(4)}, s)
	require.Contains(t, fs.Lookup("retry-budget-per-workflow-max").Usage, "RETRY_BUDGET_PER_WORKFLOW_MAX")
}

// The AD-44 profile (20 / 50 / 3 / 5) is one flag or variable away, and
// what is set explicitly wins over it.
func TestSettingsProfile(t *testing.T) {
	items := int64(1000)
	rec := budget.Effective(&messages.JobSpec{}, items, budget.Settings{Profile: budget.ProfileAD44})
	require.Equal(t, 20, rec.Total)
	require.Equal(t, 3, rec.PerItemMax)
	rec = budget.Effective(&messages.JobSpec{RetryBudget: budget.Count(80), RetryBudgetPerItem: budget.Count(10)}, items,
		budget.Settings{Profile: budget.ProfileAD44})
	require.Equal(t, 50, rec.Total)
	require.Equal(t, 5, rec.PerItemMax)
	require.Equal(t, "RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX", rec.ClampedBy)
	rec = budget.Effective(&messages.JobSpec{}, items, budget.Settings{})
	require.Equal(t, 100, rec.Total, "out of the box: max(20, 10% of 1000)")

	// From the environment, an explicit value over the profile's.
	s, err := budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PROFILE": "ad44", "RETRY_BUDGET_MAX": "40"}))
	require.NoError(t, err)
	require.Equal(t, budget.Settings{Max: budget.Count(40), PerItemDefault: budget.Count(3), PerItemMax: budget.Count(5),
		Default: budget.Count(20), Profile: "ad44"}, s.Resolved())
	require.Equal(t, "RETRY_BUDGET_PROFILE=ad44 RETRY_BUDGET_DEFAULT=20 RETRY_BUDGET_MAX=40 RETRY_BUDGET_PER_ITEM_DEFAULT=3 RETRY_BUDGET_PER_ITEM_MAX=5", s.String())
	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PROFILE": "ad-44"}))
	require.ErrorIs(t, err, budget.ErrUnknownProfile)
	_, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PROFILE": "ad44", "RETRY_BUDGET_DEFAULT": "60"}))
	require.EqualError(t, err, "budget: RETRY_BUDGET_DEFAULT (60) exceeds RETRY_BUDGET_MAX (50)", "against the profile's maximum")

	// From flags: the profile flag over the environment's profile, explicit
	// values (from either) over both.
	s, err = budget.SettingsFromEnv(getenv(map[string]string{"RETRY_BUDGET_PROFILE": "default", "RETRY_BUDGET_PER_ITEM_MAX": "4"}))
	require.NoError(t, err)
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	budget.RegisterFlags(fs, &s)
	require.NoError(t, fs.Parse([]string{"--retry-budget-profile", "ad44", "--retry-budget-default=10"}))
	require.NoError(t, s.Validate())
	require.Equal(t, budget.Settings{Default: budget.Count(10), Max: budget.Count(50), PerItemDefault: budget.Count(3),
		PerItemMax: budget.Count(4), Profile: "ad44"}, s.Resolved())
	err = fs.Parse([]string{"--retry-budget-profile=hyperscale"})
	require.ErrorContains(t, err, "unknown profile")
	require.ErrorIs(t, budget.Settings{Profile: "x"}.Validate(), budget.ErrUnknownProfile)
}
