package itemrun

import (
	"errors"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// newerSchemaDelay is how long a work message written in a newer schema
// version than this agent reads waits before its next delivery, which an
// agent of the newer release may take (docs/contract.md §8).
const newerSchemaDelay = 30 * time.Second

// outcomeNewerSchema counts the deliveries an agent left for a newer one.
const outcomeNewerSchema = "newer_schema"

// leaveNewer leaves a delivery whose work item (or whose item state) is
// in a newer schema version than this agent reads: it naks it with
// newerSchemaDelay and touches nothing else, neither the item's state nor
// the DLQ, so that an agent of the release that wrote it runs it. It
// reports whether it did.
func (a *Agent) leaveNewer(it *item, err error) bool {
	if !errors.Is(err, messages.ErrNewerSchema) {
		return false
	}
	a.log.Warn().Err(err).Str("job_id", it.wi.JobID).Str("item_id", it.wi.ItemID).Dur("delay", newerSchemaDelay).
		Msg("work message left for an agent of a newer release")
	a.metrics.items.WithLabelValues(outcomeNewerSchema).Inc()
	a.nakDelay(it, newerSchemaDelay)
	return true
}
