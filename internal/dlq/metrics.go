package dlq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Metrics are the DLQ's Prometheus metrics, kept by the coordinator (one
// per fleet): what entered the DLQ by reason, its depth, bytes, fill ratio
// and oldest entry, and what replays did. No job or item labels.
type Metrics struct {
	DeadLettered      *prometheus.CounterVec
	Depth             prometheus.Gauge
	Bytes             prometheus.Gauge
	FillRatio         prometheus.Gauge
	OldestAge         prometheus.Gauge
	Replayed          prometheus.Counter
	ReplaysInProgress prometheus.Gauge
	// PoolBytes and PoolFillRatio are each pool's dead letters against
	// its quota (labelled by pool: as many as the fleet's pools).
	PoolBytes     *prometheus.GaugeVec
	PoolFillRatio *prometheus.GaugeVec
	// PoolMissing is 1 for a pool that has agents and no dead-letter
	// stream (its quota could not be reserved), 0 once it has one.
	PoolMissing *prometheus.GaugeVec
}

// NewMetrics returns the DLQ metrics, registered on reg unless it is nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_dlq_dead_lettered_total", Help: "Entries stored in the DLQ stream since the coordinator started, by reason.",
		}, []string{"reason"}),
		Depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_depth_messages", Help: "Entries in the DLQ stream.",
		}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_bytes", Help: "Bytes stored in the DLQ stream.",
		}),
		FillRatio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_fill_ratio", Help: "The DLQ stream's messages or bytes over its limit, whichever is larger (0 without limits).",
		}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_oldest_entry_age_seconds", Help: "Age of the oldest entry in the DLQ stream (0 when empty).",
		}),
		Replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_dlq_replayed_total", Help: "Entries replayed: republished and removed from the DLQ.",
		}),
		ReplaysInProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_replays_in_progress", Help: "DLQ replays running on the coordinator.",
		}),
		PoolBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_pool_bytes", Help: "Bytes of a pool's dead letters (its dead-letter stream, within its quota).",
		}, []string{"pool"}),
		PoolFillRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_pool_fill_ratio", Help: "A pool's dead letters over its quota (messages or bytes, whichever is larger): at 1 its agents keep the items they would dead-letter.",
		}, []string{"pool"}),
		PoolMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetfleet_dlq_pool_stream_missing", Help: "1 for a pool that has agents and no dead-letter stream (its quota could not be reserved): its dead letters have no quota, and agents that may publish only to it keep those items.",
		}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.DeadLettered, m.Depth, m.Bytes, m.FillRatio, m.OldestAge, m.Replayed, m.ReplaysInProgress, m.PoolBytes, m.PoolFillRatio, m.PoolMissing)
	}
	return m
}

// knownReasons are the reason label values; anything else counts as "other"
// (labels stay bounded whatever is published to the DLQ).
var knownReasons = map[string]bool{
	messages.ReasonAttempts: true, messages.ReasonRetryBudget: true, messages.ReasonNotRetryable: true,
	messages.ReasonPermanent: true, messages.ReasonItemBudget: true, messages.ReasonJobBudget: true,
	messages.ReasonMaxDeliveries: true, messages.ReasonPoison: true, messages.ReasonUnknownHandler: true,
	messages.ReasonJobGone: true, messages.ReasonBadSignature: true, messages.ReasonItemRetryExhausted: true, messages.ReasonCustomFailed: true,
	messages.ReasonCircuitOpen: true, messages.ReasonAgentTimeout: true,
}

// ReasonLabel maps a dead-letter reason to its metric label.
func ReasonLabel(reason string) string {
	switch {
	case reason == "":
		return "unknown"
	case knownReasons[reason]:
		return reason
	}
	return "other"
}
