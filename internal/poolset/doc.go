// Package poolset knows the work stream's pools (docs/security.md,
// "Limits"): which pool a job may name (the configured ones, those the
// coordinator's NATS permissions cover, at most MaxPools in all), which
// pools the work stream has, and the making of a pool's consumer and
// streams (internal/provision) once a minute at most.
//
// It owns that knowledge and nothing else. It may not touch a job, its
// record or its runner, and it counts no open job (the coordinator's
// intake does): internal/jobrun asks it about a pool and makes it.
package poolset
