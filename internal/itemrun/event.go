package itemrun

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// event publishes one of the agent's events (best effort, not awaited) on
// fleet.events.<job>.<kind>.<pool>: name is its type, data its typed
// payload (messages.BudgetExhaustedEvent, messages.BreakerChangedEvent).
func (a *Agent) event(job, kind, name string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		a.log.Error().Err(err).Str("event", name).Msg("event not encoded")
		return
	}
	body, _ := json.Marshal(messages.Event{Type: name, JobID: job, Time: a.cfg.hooks.Clock.Now(), Data: raw}) // valid JSON in, so always encoded
	m := nats.NewMsg(wire.AgentEventSubject(a.names, a.cfg.Pool, job, kind))
	m.Data = body
	m.Header.Set(messages.HeaderJobID, job)
	m.Header.Set(messages.HeaderEventType, name)
	if _, err := a.pub.PublishMsgAsync(m); err != nil {
		a.log.Debug().Err(err).Str("event", name).Msg("event not published")
	}
}
