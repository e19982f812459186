package budget_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The coordinator computes a job's budget from its spec and the operator
// settings.
func ExampleEffective() {
	spec := &messages.JobSpec{RetryBudget: budget.Count(100), RetryBudgetPerItem: budget.Count(10)}
	rec := budget.Effective(spec, 200, budget.AD44Settings())
	fmt.Printf("total %d (requested %s), per item %d (requested %s), clamped by %s\n",
		rec.Total, rec.RequestedTotal, rec.PerItemMax, rec.RequestedPerItem, rec.ClampedBy)

	pct := budget.Effective(&messages.JobSpec{RetryBudget: budget.Percent(10)}, 5, budget.Settings{})
	fmt.Printf("10%% of 5 items: %d\n", pct.Total)
	// Output:
	// total 50 (requested 100), per item 5 (requested 10), clamped by RETRY_BUDGET_MAX,RETRY_BUDGET_PER_ITEM_MAX
	// 10% of 5 items: 1
}

// The coordinator creates the record at submission; agents claim a unit
// before every retry.
func ExampleBudget_Claim() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, stop := exampleJetStream()
	defer stop()

	kv, err := js.CreateOrUpdateKeyValue(ctx, budget.BucketConfig(messages.MustNames("").BudgetBucket(), 1))
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

	rec := budget.Effective(&messages.JobSpec{RetryBudget: budget.Count(2), RetryBudgetPerItem: budget.Count(1)}, 10, budget.Settings{})
	if _, _, err := b.Create(ctx, "nightly", rec); err != nil {
		fmt.Println(err)
		return
	}

	// Item a fails twice, then items b and c fail once. The argument is how
	// many retries the item has already been granted.
	for _, try := range []struct {
		item    string
		retries int
	}{{"a", 0}, {"a", 1}, {"b", 0}, {"c", 0}} {
		g, err := b.Claim(ctx, "nightly", try.retries)
		switch {
		case err != nil:
			fmt.Println(err) // infrastructure: nak with a delay and try later
		case g.Granted:
			fmt.Printf("%s: retry\n", try.item)
		default:
			fmt.Printf("%s: fail, %s (%d/%d)\n", try.item, g.Deny.Reason, g.Deny.Consumed, g.Deny.Limit)
		}
	}
	st, _ := b.Get(ctx, "nightly")
	fmt.Printf("consumed %d of %d, exhausted %v\n", st.Consumed, st.Total, st.Exhausted)
	// Output:
	// a: retry
	// a: fail, item_budget_exhausted (1/1)
	// b: retry
	// c: fail, job_budget_exhausted (2/2)
	// consumed 2 of 2, exhausted true
}

// exampleJetStream starts an embedded JetStream server (tests use
// pkg/fleettest instead) and connects to it.
func exampleJetStream() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "budget-example-")
	if err != nil {
		panic(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	return js, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}
