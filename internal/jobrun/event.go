package jobrun

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// event publishes a lifecycle event of job on
// fleet.events.<job>.<token> (messages.EventOf); events are best effort.
func (c *Coordinator) event(job string, data messages.EventPayload) {
	raw, err := json.Marshal(data)
	if err != nil {
		return
	}
	name, token := messages.EventOf(data)
	body, _ := json.Marshal(messages.Event{Type: name, JobID: job, Time: c.cfg.hooks.Clock.Now(), Data: raw})
	m := nats.NewMsg(c.names.EventSubject(job, token))
	m.Data = body
	m.Header.Set(messages.HeaderJobID, job)
	m.Header.Set(messages.HeaderEventType, name)
	if _, err := c.js.PublishMsgAsync(m); err != nil {
		c.log.Debug().Err(err).Str("event", name).Msg("event not published")
	}
}
