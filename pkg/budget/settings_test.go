package budget_test

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/budget"
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
