package ui

import "github.com/prometheus/client_golang/prometheus"

// metrics are the dashboard's Prometheus metrics.
type metrics struct {
	clients  prometheus.Gauge
	dropped  prometheus.Counter
	requests *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_ui_live_clients", Help: "Browsers connected for live updates.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_ui_live_dropped_total", Help: "Browsers disconnected because they fell behind the live updates.",
		}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jetfleet_ui_request_duration_seconds", Help: "Time to serve a dashboard request, by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"route"}),
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.dropped, m.requests)
	}
	return m
}
