package obs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A component built again on a new connection registers the same metrics
// again: each generation replaces the previous one's.
func TestGenerationsReplaceTheirCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGenerations(reg)
	for gen := 0; gen < 3; gen++ {
		r := g.Next()
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "jetfleet_test_total"})
		r.MustRegister(c)
		c.Add(float64(gen))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != float64(gen) {
			t.Fatalf("generation %d: gathered %v", gen, mfs)
		}
	}
	if err := reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "jetfleet_test_total"})); err == nil {
		t.Fatal("the last generation's counter is still registered, a duplicate must be refused")
	}
}
