package budget

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of jetfleet_retry_budget_claims_total.
const (
	ResultGranted    = "granted"
	ResultDeniedItem = "denied_item"
	ResultDeniedJob  = "denied_job"
	ResultError      = "error"
)

type metrics struct {
	consumed  prometheus.Counter
	exhausted *prometheus.CounterVec
	claims    *prometheus.CounterVec
	remaining *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		consumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_retry_budget_consumed_total",
			Help: "Retry-budget units this process recorded in KV (summed over the fleet: the budgets' consumed).",
		}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_retry_budget_exhausted_total",
			Help: "Budgets run out: scope=job once per job (by the process whose write exhausted it), scope=item per item denied by its cap.",
		}, []string{"scope"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_retry_budget_claims_total",
			Help: "Claims by result: granted, denied_item, denied_job, error.",
		}, []string{"result"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetfleet_retry_budget_remaining",
			Help: "Retries left in a job's budget as last seen by this process; removed by Forget.",
		}, []string{"job_id"}),
	}
	for _, s := range []string{ScopeItem, ScopeJob} {
		m.exhausted.WithLabelValues(s)
	}
	for _, r := range []string{ResultGranted, ResultDeniedItem, ResultDeniedJob, ResultError} {
		m.claims.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.consumed, err = register(reg, m.consumed); err != nil {
		return nil, err
	}
	if m.exhausted, err = register(reg, m.exhausted); err != nil {
		return nil, err
	}
	if m.claims, err = register(reg, m.claims); err != nil {
		return nil, err
	}
	if m.remaining, err = register(reg, m.remaining); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same name (several Budgets in one process share the metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *metrics) claim(g Grant, err error) {
	switch {
	case err != nil:
		m.claims.WithLabelValues(ResultError).Inc()
	case g.Granted:
		m.claims.WithLabelValues(ResultGranted).Inc()
	case g.Deny.Scope() == ScopeItem:
		m.claims.WithLabelValues(ResultDeniedItem).Inc()
		m.exhausted.WithLabelValues(ScopeItem).Inc()
	default:
		m.claims.WithLabelValues(ResultDeniedJob).Inc()
	}
}
