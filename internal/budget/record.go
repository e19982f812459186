package budget

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// What lowered a requested value, as listed in Record.ClampedBy.
const (
	ClampedByMax        = EnvMax         // the job budget hit RETRY_BUDGET_MAX
	ClampedByPerItemMax = EnvPerItemMax  // the per-item budget hit RETRY_BUDGET_PER_ITEM_MAX
	ClampedByTotal      = "retry_budget" // the per-item budget was above the job's total
)

const (
	clampSep     = "," // separator of several clamps in ClampedBy
	recentClaims = 16  // claim ids kept in a record to settle in-doubt writes
)

// Record is a job's retry budget, the value of its key in the fleet_budget
// bucket. A Record is a plain value, safe to copy; it is not safe to mutate
// one from several goroutines.
type Record struct {
	// V is the schema version (docs/contract.md §8).
	V messages.Schema `json:"v"`
	// Total is the effective job budget: retries all items may claim together.
	Total int
	// PerItemMax is the effective cap of one item. Without a per-item
	// setting it equals Total (no cap beyond the job's).
	PerItemMax int
	// Consumed is how many retries have been granted (recorded) so far.
	Consumed int
	// RequestedTotal and RequestedPerItem are the spec's values as written
	// ("20", "10%"), or "" when the spec left them unset.
	RequestedTotal   string
	RequestedPerItem string
	// ClampedBy lists, comma-separated, what lowered a requested value:
	// ClampedByMax, ClampedByPerItemMax, ClampedByTotal. Empty when nothing
	// did.
	ClampedBy string
	// Exhausted is Consumed >= Total. A budget never refills.
	Exhausted bool

	// recent are the ids of the last claims written, so that a writer whose
	// PubAck was lost can tell whether its write landed.
	recent []claimRef
}

type claimRef struct {
	ID    string `json:"id"`
	Units int    `json:"units"`
}

type wireRecord struct {
	Total            int        `json:"total"`
	PerItemMax       int        `json:"per_item_max"`
	Consumed         int        `json:"consumed"`
	RequestedTotal   string     `json:"requested_total"`
	RequestedPerItem string     `json:"requested_per_item"`
	ClampedBy        string     `json:"clamped_by"`
	Exhausted        bool       `json:"exhausted"`
	RecentClaims     []claimRef `json:"recent_claims,omitempty"`
}

// MarshalJSON writes the snake_case form stored in KV.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireRecord{
		Total: r.Total, PerItemMax: r.PerItemMax, Consumed: r.Consumed,
		RequestedTotal: r.RequestedTotal, RequestedPerItem: r.RequestedPerItem,
		ClampedBy: r.ClampedBy, Exhausted: r.Exhausted, RecentClaims: r.recent,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (r *Record) UnmarshalJSON(b []byte) error {
	var w wireRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Record{
		Total: w.Total, PerItemMax: w.PerItemMax, Consumed: w.Consumed,
		RequestedTotal: w.RequestedTotal, RequestedPerItem: w.RequestedPerItem,
		ClampedBy: w.ClampedBy, Exhausted: w.Exhausted, recent: w.RecentClaims,
	}
	return nil
}

// Remaining is Total - Consumed, never negative.
func (r Record) Remaining() int { return max(0, r.Total-r.Consumed) }

// Status maps the record onto the budget block of a job status. The denial
// counters are the coordinator's to fill.
func (r Record) Status() messages.BudgetStatus {
	return messages.BudgetStatus{
		Total: r.Total, PerItemMax: r.PerItemMax, Consumed: r.Consumed, Exhausted: r.Exhausted,
		RequestedTotal: r.RequestedTotal, RequestedPerItem: r.RequestedPerItem, ClampedBy: r.ClampedBy,
	}
}

func (r Record) validate() error {
	if r.Total < 0 || r.PerItemMax < 0 || r.Consumed < 0 {
		return fmt.Errorf("%w: negative value (total %d, per_item_max %d, consumed %d)", ErrInvalidRecord, r.Total, r.PerItemMax, r.Consumed)
	}
	return nil
}

// Claim decides one claim of a retry against r, for an item that has
// already been granted itemRetries retries (all its steps together): the
// per-item cap first, then the job budget. A grant returns r with the unit
// consumed; a denial returns r unchanged and says why.
//
// Claim is the whole decision of a claim. [Budget.Claim] decides each claim
// the same way against the record it holds — the same per-item check, then
// the units the record has left — and records the units of concurrent
// claims with one compare-and-set; the outage simulator (internal/simulate)
// claims with Claim itself.
func (r Record) Claim(itemRetries int) (Record, Grant) {
	if g, denied := r.itemDenial(itemRetries); denied {
		return r, g
	}
	if r.Remaining() == 0 {
		return r, denyJob(r.Consumed, r.Total)
	}
	return r.take(1), granted
}

// itemDenial is the refusal of r's per-item cap for an item already
// granted itemRetries retries; denied is false when the cap allows one more.
func (r Record) itemDenial(itemRetries int) (g Grant, denied bool) {
	if itemRetries = max(itemRetries, 0); itemRetries >= r.PerItemMax {
		return denyItem(itemRetries, r.PerItemMax), true
	}
	return Grant{}, false
}

// take is r with units more consumed.
func (r Record) take(units int) Record {
	r.Consumed += units
	r.Exhausted = r.Consumed >= r.Total
	return r
}

// consume is r after a claim of units with the given id.
func (r Record) consume(units int, id string) Record {
	r = r.take(units)
	keep := r.recent
	if len(keep) >= recentClaims {
		keep = keep[len(keep)-recentClaims+1:]
	}
	r.recent = append(append(make([]claimRef, 0, len(keep)+1), keep...), claimRef{ID: id, Units: units})
	return r
}

// Effective computes the budget of a job of items items from its spec and
// the operator settings:
//
//   - a count is taken as is; a percentage is of the job's items, rounded up
//     (10% of 5 items is 1), so any positive percentage of a non-empty job
//     allows at least one retry; 0 and 0% mean no retries;
//   - s's unset fields take its Profile's values (Settings.Resolved);
//   - an unset retry_budget takes s.Default, or max(20, 10% of items);
//   - the job budget is then clamped to s.Max;
//   - an unset retry_budget_per_item takes s.PerItemDefault, or no per-item
//     cap (PerItemMax = Total: the step's attempts bound an item);
//   - the per-item budget is clamped to s.PerItemMax, then to the total.
//
// The record keeps the requested values and, in ClampedBy, names every
// limit that lowered a value the spec requested (defaults are lowered
// silently: an empty requested value already says a default applied).
// Effective assumes s is valid (see Settings.Validate) and treats negative
// values as 0.
func Effective(spec *messages.JobSpec, items int64, s Settings) Record {
	s = s.Resolved()
	if spec == nil {
		spec = &messages.JobSpec{}
	}
	items = max(items, 0)
	var rec Record
	var clamps []string

	rec.RequestedTotal = FormatValue(spec.RetryBudget)
	switch {
	case spec.RetryBudget != nil:
		rec.Total = resolve(spec.RetryBudget, items)
	case s.Default != nil:
		rec.Total = resolve(s.Default, items)
	default:
		rec.Total = max(BuiltinDefaultFloor, resolve(Percent(BuiltinDefaultPercent), items))
	}
	if s.Max != nil {
		if m := resolve(s.Max, items); rec.Total > m {
			rec.Total = m
			if spec.RetryBudget != nil {
				clamps = append(clamps, ClampedByMax)
			}
		}
	}

	rec.RequestedPerItem = FormatValue(spec.RetryBudgetPerItem)
	perItem := spec.RetryBudgetPerItem
	if perItem == nil {
		perItem = s.PerItemDefault
	}
	if perItem == nil {
		// No per-item cap: an item may use the whole budget, within the
		// operator's per-item ceiling (not a clamp of a requested value).
		rec.PerItemMax = rec.Total
		if s.PerItemMax != nil {
			rec.PerItemMax = min(rec.PerItemMax, resolve(s.PerItemMax, items))
		}
	} else {
		requested := spec.RetryBudgetPerItem != nil
		rec.PerItemMax = resolve(perItem, items)
		if s.PerItemMax != nil {
			if m := resolve(s.PerItemMax, items); rec.PerItemMax > m {
				rec.PerItemMax = m
				if requested {
					clamps = append(clamps, ClampedByPerItemMax)
				}
			}
		}
		if rec.PerItemMax > rec.Total {
			rec.PerItemMax = rec.Total
			if requested {
				clamps = append(clamps, ClampedByTotal)
			}
		}
	}
	rec.ClampedBy = strings.Join(clamps, clampSep)
	rec.Exhausted = rec.Total == 0
	return rec
}

// resolve turns a count or a percentage of items into retries, rounding
// percentages up and ignoring float noise (10% of 200 is 20, not 21).
func resolve(v *messages.BudgetValue, items int64) int {
	if !v.IsPercent {
		return min(max(v.Count, 0), MaxUnits)
	}
	if v.Percent <= 0 || math.IsNaN(v.Percent) {
		return 0
	}
	x := v.Percent * float64(items) / 100
	if x >= MaxUnits {
		return MaxUnits
	}
	if r := math.Round(x); math.Abs(x-r) <= 1e-9*math.Max(1, x) {
		return int(r)
	}
	return int(math.Ceil(x))
}

// claimed reports whether r lists the claim written with id among its
// recent claims: a writer whose reply was lost finds its write by it.
func (r Record) claimed(id string) bool {
	for _, c := range r.recent {
		if c.ID == id {
			return true
		}
	}
	return false
}
