package obs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Generations is a prometheus.Registerer for a component that is built
// again on every new connection (natsconn.Supervisor): Next unregisters
// what the previous generation registered, so the new one can register
// the same metrics. Safe for concurrent use.
type Generations struct {
	reg prometheus.Registerer

	mu   sync.Mutex
	cols []prometheus.Collector
}

// NewGenerations registers into reg.
func NewGenerations(reg prometheus.Registerer) *Generations { return &Generations{reg: reg} }

// Next unregisters every collector registered so far and returns g, to
// pass to the next generation of the component.
func (g *Generations) Next() prometheus.Registerer {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.cols {
		g.reg.Unregister(c)
	}
	g.cols = nil
	return g
}

// Register implements prometheus.Registerer.
func (g *Generations) Register(c prometheus.Collector) error {
	if err := g.reg.Register(c); err != nil {
		return err
	}
	g.mu.Lock()
	g.cols = append(g.cols, c)
	g.mu.Unlock()
	return nil
}

// MustRegister implements prometheus.Registerer.
func (g *Generations) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := g.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (g *Generations) Unregister(c prometheus.Collector) bool {
	g.mu.Lock()
	for i, x := range g.cols {
		if x == c {
			g.cols = append(g.cols[:i], g.cols[i+1:]...)
			break
		}
	}
	g.mu.Unlock()
	return g.reg.Unregister(c)
}
