package jobrun

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published      prometheus.Counter
	publishRetries prometheus.Counter
	jobsAccepted   prometheus.Counter
	jobsRejected   prometheus.Counter
	jobsFinished   *prometheus.CounterVec
	activeJobs     prometheus.Gauge
	leader         prometheus.Gauge
	storeFull      prometheus.Gauge
	inFlight       prometheus.GaugeFunc

	bestEffort      *prometheus.CounterVec
	bestEffortRatio prometheus.Gauge
	lateResults     *prometheus.CounterVec
	resultsRefused  *prometheus.CounterVec
	jobsCleaned     prometheus.Counter
	jobsPruned      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, inFlight func() float64) *metrics {
	m := &metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_items_published_total", Help: "Work items published to the work stream.",
		}),
		publishRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_publish_retries_total", Help: "Work publishes refused by the stream (full) and retried.",
		}),
		jobsAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_jobs_accepted_total", Help: "Jobs accepted.",
		}),
		jobsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_jobs_rejected_total", Help: "Durable submissions rejected by validation.",
		}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_jobs_finished_total", Help: "Jobs finished, by final state.",
		}, []string{"state"}),
		activeJobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_coordinator_active_jobs", Help: "Jobs being published and tracked.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_coordinator_leader", Help: "1 while this coordinator leads its prefix (holds the lease), else 0.",
		}),
		storeFull: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_coordinator_store_full",
			Help: "1 while JetStream refuses this coordinator's writes for want of room (max_file_store or the account's limit reached: submissions refused, the lease not written), else 0.",
		}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "jetfleet_coordinator_publish_window", Help: "Published items without an outcome, over all active jobs.",
		}, inFlight),
		bestEffort: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_best_effort_completions_total", Help: "Best-effort jobs whose map phase completed, by completion reason.",
		}, []string{"reason"}),
		bestEffortRatio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_best_effort_completion_ratio", Help: "Completed groups over all groups at the last best-effort completion.",
		}),
		lateResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_late_results_total", Help: "Results that arrived after their job's map phase ended, by late_results policy.",
		}, []string{"policy"}),
		resultsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_results_refused_total",
			Help: "Results and dead-letter entries refused because they did not come from the pool their item was routed to (wrong_pool) or only the coordinator may write them (coordinator_only).",
		}, []string{"reason"}),
		jobsCleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_jobs_cleaned_total", Help: "Settled jobs whose item state, budget, breaker, results and inputs were removed.",
		}),
		jobsPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_coordinator_jobs_pruned_total", Help: "Expired job records deleted (retention or jobs.prune).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.publishRetries, m.jobsAccepted, m.jobsRejected, m.jobsFinished, m.activeJobs, m.inFlight,
			m.bestEffort, m.bestEffortRatio, m.lateResults, m.resultsRefused, m.jobsCleaned, m.jobsPruned, m.storeFull)
	}
	return m
}
