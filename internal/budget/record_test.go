package budget_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestEffective(t *testing.T) {
	count, pct := budget.Count, budget.Percent
	ad44 := budget.AD44Settings()
	tests := []struct {
		name     string
		budget   *messages.BudgetValue
		perItem  *messages.BudgetValue
		items    int64
		settings budget.Settings
		want     budget.Record
	}{
		// Out of the box: max(20, 10% of items), no per-item cap, no maxima.
		{name: "unset small job uses floor 20", items: 100,
			want: budget.Record{Total: 20, PerItemMax: 20}},
		{name: "unset large job uses 10%", items: 1000,
			want: budget.Record{Total: 100, PerItemMax: 100}},
		{name: "unset 10% rounds up", items: 201,
			want: budget.Record{Total: 21, PerItemMax: 21}},
		{name: "unset empty job", items: 0,
			want: budget.Record{Total: 20, PerItemMax: 20}},
		{name: "count", budget: count(5), items: 1000,
			want: budget.Record{Total: 5, PerItemMax: 5, RequestedTotal: "5"}},
		{name: "percent exact despite float noise", budget: pct(10), items: 200,
			want: budget.Record{Total: 20, PerItemMax: 20, RequestedTotal: "10%"}},
		{name: "percent rounds up", budget: pct(10), items: 5,
			want: budget.Record{Total: 1, PerItemMax: 1, RequestedTotal: "10%"}},
		{name: "fractional percent rounds up", budget: pct(33.3), items: 10,
			want: budget.Record{Total: 4, PerItemMax: 4, RequestedTotal: "33.3%"}},
		{name: "percent above 100", budget: pct(250), items: 10,
			want: budget.Record{Total: 25, PerItemMax: 25, RequestedTotal: "250%"}},
		{name: "zero means no retries", budget: count(0), items: 100,
			want: budget.Record{Total: 0, PerItemMax: 0, RequestedTotal: "0", Exhausted: true}},
		{name: "zero percent means no retries", budget: pct(0), items: 100,
			want: budget.Record{Total: 0, PerItemMax: 0, RequestedTotal: "0%", Exhausted: true}},
		{name: "per-item count", budget: count(20), perItem: count(3), items: 200,
			want: budget.Record{Total: 20, PerItemMax: 3, RequestedTotal: "20", RequestedPerItem: "3"}},
		{name: "per-item percent", budget: count(50), perItem: pct(2), items: 1000,
			want: budget.Record{Total: 50, PerItemMax: 20, RequestedTotal: "50", RequestedPerItem: "2%"}},
		{name: "per-item zero", budget: count(20), perItem: count(0), items: 200,
			want: budget.Record{Total: 20, PerItemMax: 0, RequestedTotal: "20", RequestedPerItem: "0"}},
		{name: "per-item above total clamped to total", budget: count(5), perItem: count(10), items: 200,
			want: budget.Record{Total: 5, PerItemMax: 5, RequestedTotal: "5", RequestedPerItem: "10", ClampedBy: "retry_budget"}},

		// Operator maxima.
		{name: "count above max", budget: count(100), items: 200, settings: budget.Settings{Max: count(50)},
			want: budget.Record{Total: 50, PerItemMax: 50, RequestedTotal: "100", ClampedBy: "RETRY_BUDGET_MAX"}},
		{name: "percent above max", budget: pct(50), items: 1000, settings: budget.Settings{Max: count(50)},
			want: budget.Record{Total: 50, PerItemMax: 50, RequestedTotal: "50%", ClampedBy: "RETRY_BUDGET_MAX"}},
		{name: "count above percent max", budget: count(30), items: 100, settings: budget.Settings{Max: pct(10)},
			want: budget.Record{Total: 10, PerItemMax: 10, RequestedTotal: "30", ClampedBy: "RETRY_BUDGET_MAX"}},
		{name: "at max is not clamped", budget: count(50), items: 100, settings: budget.Settings{Max: count(50)},
			want: budget.Record{Total: 50, PerItemMax: 50, RequestedTotal: "50"}},
		{name: "built-in default above max is lowered silently", items: 10000, settings: budget.Settings{Max: count(50)},
			want: budget.Record{Total: 50, PerItemMax: 50}},
		{name: "operator default percent", items: 400, settings: budget.Settings{Default: pct(5)},
			want: budget.Record{Total: 20, PerItemMax: 20}},
		{name: "per-item above per-item max", budget: count(20), perItem: count(8), items: 100,
			settings: budget.Settings{PerItemMax: count(5)},
			want:     budget.Record{Total: 20, PerItemMax: 5, RequestedTotal: "20", RequestedPerItem: "8", ClampedBy: "RETRY_BUDGET_PER_ITEM_MAX"}},
		{name: "unset per-item under per-item max ceiling", budget: count(20), items: 100,
			settings: budget.Settings{PerItemMax: count(5)},
			want:     budget.Record{Total: 20, PerItemMax: 5, RequestedTotal: "20"}},

		// The AD-44 profile: 20 / 50 / 3 / 5.
		{name: "AD-44 unset", items: 200, settings: ad44,
			want: budget.Record{Total: 20, PerItemMax: 3}},
		{name: "AD-44 requested within limits", budget: count(40), perItem: count(4), items: 200, settings: ad44,
			want: budget.Record{Total: 40, PerItemMax: 4, RequestedTotal: "40", RequestedPerItem: "4"}},
		{name: "AD-44 both above max", budget: count(100), perItem: count(10), items: 200, settings: ad44,
			want: budget.Record{Total: 50, PerItemMax: 5, RequestedTotal: "100", RequestedPerItem: "10",
				ClampedBy: "RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX"}},
		{name: "AD-44 percent above max", budget: pct(10), items: 10000, settings: ad44,
			want: budget.Record{Total: 50, PerItemMax: 3, RequestedTotal: "10%", ClampedBy: "RETRY_BUDGET_MAX"}},
		{name: "AD-44 per-item above small total", budget: count(2), perItem: count(5), items: 200, settings: ad44,
			want: budget.Record{Total: 2, PerItemMax: 2, RequestedTotal: "2", RequestedPerItem: "5", ClampedBy: "retry_budget"}},
		{name: "AD-44 per-item default lowered to a small total", budget: count(2), items: 200, settings: ad44,
			want: budget.Record{Total: 2, PerItemMax: 2, RequestedTotal: "2"}},
		{name: "AD-44 zero", budget: count(0), items: 200, settings: ad44,
			want: budget.Record{Total: 0, PerItemMax: 0, RequestedTotal: "0", Exhausted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &messages.JobSpec{RetryBudget: tt.budget, RetryBudgetPerItem: tt.perItem}
			require.Equal(t, tt.want, budget.Effective(spec, tt.items, tt.settings))
		})
	}
}

func TestEffectiveNilSpecAndHugeJobs(t *testing.T) {
	require.Equal(t, budget.Record{Total: 20, PerItemMax: 20}, budget.Effective(nil, 10, budget.Settings{}))
	huge := budget.Effective(&messages.JobSpec{RetryBudget: budget.Percent(1e6)}, 1<<50, budget.Settings{})
	require.Equal(t, budget.MaxUnits, huge.Total)
}

func TestRecordJSON(t *testing.T) {
	rec := budget.Record{Total: 50, PerItemMax: 5, Consumed: 7, RequestedTotal: "100", RequestedPerItem: "10",
		ClampedBy: "RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX"}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.JSONEq(t, `{"total":50,"per_item_max":5,"consumed":7,"requested_total":"100","requested_per_item":"10",
		"clamped_by":"RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX","exhausted":false}`, string(b))
	var back budget.Record
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, rec, back)

	st := rec.Status()
	require.Equal(t, messages.BudgetStatus{Total: 50, PerItemMax: 5, Consumed: 7, RequestedTotal: "100",
		RequestedPerItem: "10", ClampedBy: "RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX"}, st)
	require.Equal(t, 43, rec.Remaining())
}

func TestRecordClaim(t *testing.T) {
	tests := []struct {
		name        string
		rec         budget.Record
		itemRetries int
		wantReason  string // "" = granted
		wantDeny    budget.Deny
	}{
		{name: "granted", rec: budget.Record{Total: 5, PerItemMax: 3}, itemRetries: 2},
		{name: "the last unit", rec: budget.Record{Total: 5, PerItemMax: 3, Consumed: 4}, itemRetries: 0},
		{name: "per-item cap", rec: budget.Record{Total: 5, PerItemMax: 3}, itemRetries: 3,
			wantDeny: budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 3, Limit: 3}},
		{name: "per-item cap checked first", rec: budget.Record{Total: 5, PerItemMax: 3, Consumed: 5, Exhausted: true}, itemRetries: 3,
			wantDeny: budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 3, Limit: 3}},
		{name: "job budget spent", rec: budget.Record{Total: 5, PerItemMax: 3, Consumed: 5, Exhausted: true}, itemRetries: 1,
			wantDeny: budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 5, Limit: 5}},
		{name: "over-consumed record grants nothing", rec: budget.Record{Total: 5, PerItemMax: 5, Consumed: 7}, itemRetries: 0,
			wantDeny: budget.Deny{Reason: messages.ReasonJobBudget, Consumed: 7, Limit: 5}},
		{name: "retry_budget 0: the per-item cap is 0 too", rec: budget.Record{Exhausted: true}, itemRetries: 0,
			wantDeny: budget.Deny{Reason: messages.ReasonItemBudget, Consumed: 0, Limit: 0}},
		{name: "negative retries are none", rec: budget.Record{Total: 1, PerItemMax: 1}, itemRetries: -3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, g := tt.rec.Claim(tt.itemRetries)
			if tt.wantDeny.Reason == "" {
				require.True(t, g.Granted)
				require.Nil(t, g.Deny)
				want := tt.rec
				want.Consumed++
				want.Exhausted = want.Consumed >= want.Total
				require.Equal(t, want, next)
				return
			}
			require.False(t, g.Granted)
			require.Equal(t, tt.wantDeny, *g.Deny)
			require.ErrorIs(t, g.Deny, budget.ErrExhausted)
			require.Equal(t, tt.rec, next, "a denial changes nothing")
		})
	}
}

// Claims never over-grant: from any record, claiming until denied grants
// exactly the units left, each item within its cap.
func TestRecordClaimNeverOverGrants(t *testing.T) {
	for _, c := range []struct{ total, perItem, items int }{{0, 0, 3}, {20, 3, 200}, {1000, 3, 200}, {7, 7, 1}, {50, 5, 9}} {
		rec := budget.Record{Total: c.total, PerItemMax: c.perItem, Exhausted: c.total == 0}
		grants := 0
		for range c.items {
			retries := 0
			for {
				var g budget.Grant
				if rec, g = rec.Claim(retries); !g.Granted {
					break
				}
				retries++
				grants++
			}
			require.LessOrEqual(t, retries, c.perItem)
		}
		require.Equal(t, min(c.total, c.items*c.perItem), grants, "%+v", c)
		require.Equal(t, grants, rec.Consumed)
		require.Equal(t, rec.Consumed >= rec.Total, rec.Exhausted)
	}
}
