package itemrun

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// metrics are the agent's Prometheus metrics; no item ids as labels.
type metrics struct {
	items    *prometheus.CounterVec
	attempts *prometheus.CounterVec
	retries  *prometheus.CounterVec
	// Retries run again by this agent after their delay (localretry.go).
	localRetries prometheus.Counter
	retryDelay   prometheus.Histogram
	stepDuration *prometheus.HistogramVec
	inFlight     prometheus.Gauge
	deadLettered *prometheus.CounterVec
	dlqFailures  prometheus.Counter
	// Writes JetStream refused for want of room, by what was written.
	storeFull    *prometheus.CounterVec
	budgetDenied *prometheus.CounterVec
	// Circuit breaker: deliveries parked, and state changes this agent wrote.
	breakerParked      prometheus.Counter
	limitWaits         prometheus.Counter
	breakerTransitions *prometheus.CounterVec
	// Step runs a step's own breaker refused (failed fast).
	breakerFailedFast prometheus.Counter
	// Processes shell steps left outside their process group, killed when
	// the step ended (with a subreaper).
	leftoversKilled prometheus.Counter
	// Retries parked in the park stream, and superseded deliveries acked.
	parked *prometheus.CounterVec
	// Results messages published: each holds one result or a batch.
	resultMessages prometheus.Counter

	// The children every successful item touches, looked up once.
	succeeded, attemptOK     prometheus.Counter
	handlerSteps, shellSteps prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_items_total", Help: "Items finished by this agent, by outcome.",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_attempts_total", Help: "Step attempts, by result (success, failure, cancelled).",
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_retries_total", Help: "Retries after a failure (a delayed nak, a park or a local retry), by kind (retry, snooze, item).",
		}, []string{"kind"}),
		localRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_local_retries_total", Help: "Retries and snoozes this agent ran again itself after their delay (at most --local-retry-max), without a delayed nak; also counted in retries_total.",
		}),
		retryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "jetfleet_agent_retry_delay_seconds", Help: "Backoff delays chosen for retries.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jetfleet_agent_step_duration_seconds", Help: "Duration of step attempts, by kind (shell, handler).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 12),
		}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetfleet_agent_in_flight", Help: "Items being processed by this agent.",
		}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_dead_lettered_total", Help: "Items dead-lettered by this agent, by reason.",
		}, []string{"reason"}),
		dlqFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_dlq_publish_failures_total", Help: "Dead-letter publishes that failed (item kept and retried).",
		}),
		storeFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_store_full_total",
			Help: "Writes JetStream refused for want of room (max_file_store reached), by what was written (results, park, dlq, state, budget, presence); each is tried again later, nothing is dropped.",
		}, []string{"write"}),
		budgetDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_budget_denials_total", Help: "Retries denied by the job or item retry budget, by reason.",
		}, []string{"reason"}),
		limitWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_limit_waits_total",
			Help: "Runs sent to wait outside the agent for their step's limit (delayed nak or parked), spending nothing.",
		}),
		breakerParked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_breaker_parked_total", Help: "Deliveries parked (in the park stream or with a delayed nak, nothing spent) by a job's open or half-open circuit breaker.",
		}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_breaker_transitions_total", Help: "Circuit-breaker state changes written by this agent (jobs' and steps' breakers), by new state (open, half_open, closed).",
		}, []string{"to"}),
		breakerFailedFast: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_breaker_failed_fast_total", Help: "Step runs refused by the step's own open or half-open circuit breaker (retry_config.circuit_breaker): the step failed fast (circuit_open).",
		}),
		leftoversKilled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_step_leftovers_killed_total", Help: "Processes shell steps left running outside their process group (daemons, double forks), killed and reaped when the step ended.",
		}),
		resultMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetfleet_agent_result_messages_total", Help: "Results messages published, each with one result or a batch of one job's results (items_total / this = results per message).",
		}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetfleet_agent_parked_total", Help: "Retries parked in the park stream (parked), deliveries a parked copy superseded, acked without running (superseded), items a circuit breaker parked that were sent back to work when it closed (released), and items of paused jobs or pools held in the park stream without running (held).",
		}, []string{"kind"}),
	}
	m.succeeded = m.items.WithLabelValues(messages.OutcomeSucceeded)
	m.attemptOK = m.attempts.WithLabelValues("success")
	m.handlerSteps = m.stepDuration.WithLabelValues("handler")
	m.shellSteps = m.stepDuration.WithLabelValues("shell")
	if reg != nil {
		reg.MustRegister(m.items, m.attempts, m.retries, m.retryDelay, m.stepDuration, m.inFlight, m.deadLettered, m.dlqFailures, m.storeFull, m.budgetDenied)
		reg.MustRegister(m.limitWaits, m.breakerParked, m.breakerTransitions, m.breakerFailedFast, m.leftoversKilled, m.resultMessages, m.parked, m.localRetries)
	}
	return m
}
