package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// BenchmarkPoolBehindALeaf measures what a leaf node costs a pool: the same
// two agents of 16 slots run jobs of no-op items, once for a pool whose
// agents are connected to the hub (JetStream domain hub) and once for a
// pool whose agents are connected to a leaf server without JetStream
// (--js-domain hub), alternating hub, leaf, leaf, hub, … so that the
// machine's load falls on both alike. It reports the leaf pool's rate as
// a ratio of the hub pool's in the same round, the median over the rounds
// (docs/deploy.md, "Agents at other sites"). The leaf is on the same host:
// this is the cost of the extra hop through a second server, not of a
// network's latency, which adds a round trip per pull and per result batch.
//
//	go test ./internal/e2e -run '^$' -bench PoolBehindALeaf -benchtime 1x
func BenchmarkPoolBehindALeaf(b *testing.B) {
	const items, rounds = 10000, 6
	port := fleettest.FreePort(b)
	hub := fleettest.RunServer(b, fleettest.WithLeafHub(port, hubDomain))
	leaf := fleettest.RunLeaf(b, fmt.Sprintf("127.0.0.1:%d", port))
	startCoordinator(b, hub.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision), Pools: []string{"at-hub", "at-leaf"}})
	for i := range 2 {
		startAgent(b, hub.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("hub-%d", i), Pool: "at-hub", Concurrency: 16},
			testhooks.Agent{Provision: calmProvision}), nil)
		startAgent(b, leaf.URL(), testhooks.WithAgent(agent.Config{Name: fmt.Sprintf("leaf-%d", i), Pool: "at-leaf", JSDomain: hubDomain, Concurrency: 16},
			testhooks.Agent{Provision: calmProvision}), nil)
	}
	c := client(b, hub)
	payload := itemsJSON(items, func(i int) map[string]any { return map[string]any{"i": i} })
	run := func(pool string) float64 {
		start := time.Now()
		id := submit(b, c, `{"pool": "`+pool+`", "items": `+payload+`, "agent_template": [{"handler": "noop"}]}`)
		st := waitJob(b, c, id, 5*time.Minute)
		require.Equal(b, int64(items), st.Succeeded)
		return float64(items) / time.Since(start).Seconds()
	}
	run("at-hub") // warm up
	run("at-leaf")
	var ratios []float64
	for round := range rounds {
		var hubRate, leafRate float64
		if round%2 == 0 {
			hubRate, leafRate = run("at-hub"), run("at-leaf")
		} else {
			leafRate, hubRate = run("at-leaf"), run("at-hub")
		}
		b.Logf("round %d: hub pool %.0f items/s, leaf pool %.0f items/s (%.2f)", round, hubRate, leafRate, leafRate/hubRate)
		ratios = append(ratios, leafRate/hubRate)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "leaf/hub")
	b.ReportMetric(ratios[0], "leaf/hub-min")
	b.ReportMetric(ratios[len(ratios)-1], "leaf/hub-max")
}
