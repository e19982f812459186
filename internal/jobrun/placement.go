package jobrun

import (
	"context"
	"slices"

	"github.com/jetfleet/jetfleet/internal/placement"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/internal/wire"
)

// runPlacement moves the consumers of the fleet's streams off a replica
// that applies nothing (a node whose store is full, or one cut off the
// cluster), every placement.DefaultInterval, while this coordinator leads
// (docs/deploy.md, "A full store"). On one node there are no replicas.
func (c *Coordinator) runPlacement(ctx context.Context) error {
	if c.cfg.Provision.Replicas <= 1 {
		return nil
	}
	return placement.Run(ctx, placement.Config{JetStream: c.js, Streams: c.fleetStreams, Log: &c.log})
}

// fleetStreams names the streams the coordinator provisions: those of
// every fleet (provision.Streams, the buckets' and object stores'), and
// each known pool's park stream, dead-letter stream, reduce store and
// specs bucket.
func (c *Coordinator) fleetStreams() []string {
	cfg := c.cfg.Provision.config()
	var names []string
	for _, sc := range provision.Streams(c.names, cfg) {
		names = append(names, sc.Name)
	}
	for _, kc := range provision.Buckets(c.names, cfg) {
		names = append(names, "KV_"+kc.Bucket)
	}
	for _, oc := range provision.ObjectStores(c.names, cfg) {
		names = append(names, "OBJ_"+oc.Bucket)
	}
	pools := slices.Clone(c.cfg.Pools)
	pools = append(pools, c.pools.Known()...)
	slices.Sort(pools)
	for _, p := range slices.Compact(pools) {
		names = append(names, c.names.ParkStream(p), wire.PoolDLQStream(c.names, p),
			"OBJ_"+c.names.ReduceBucket(p), "KV_"+c.names.SpecsBucket(p))
	}
	return names
}
