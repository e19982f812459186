package budget_test

import (
	"context"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/budget"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// A job gets 2 retries for all its items, at most 1 for any one item;
// every retry claims a unit first.
func ExampleBudget_Claim() {
	t := fleettest.NewExampleTB() // in a test: the test's *testing.T
	defer t.Close()
	js := fleettest.RunServer(t).JS()
	ctx := context.Background()

	kv, err := js.CreateOrUpdateKeyValue(ctx, budget.BucketConfig("retry_budget", 1))
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := budget.New(kv, budget.WithJetStream(js))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	if _, _, err := b.Create(ctx, "nightly", 2, 1); err != nil {
		fmt.Println(err)
		return
	}
	// Item a fails twice, then items b and c fail once. The argument is how
	// many retries the item has been granted so far.
	for _, try := range []struct {
		item    string
		retries int
	}{{"a", 0}, {"a", 1}, {"b", 0}, {"c", 0}} {
		g, err := b.Claim(ctx, "nightly", try.retries)
		switch {
		case err != nil:
			fmt.Println(err) // the bucket did not answer: try again later
		case g.Granted:
			fmt.Printf("%s: retry\n", try.item)
		default:
			fmt.Printf("%s: give up, %s (%d/%d)\n", try.item, g.Deny.Reason, g.Deny.Consumed, g.Deny.Limit)
		}
	}
	rec, _ := b.Get(ctx, "nightly")
	fmt.Printf("consumed %d of %d, exhausted %v\n", rec.Consumed, rec.Total, rec.Exhausted)
	// Output:
	// a: retry
	// a: give up, item_budget_exhausted (1/1)
	// b: retry
	// c: give up, job_budget_exhausted (2/2)
	// consumed 2 of 2, exhausted true
}
