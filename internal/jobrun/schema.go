package jobrun

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// schemaHeader is the messages.HeaderSchema value of this build's API
// requests and durable submissions, whose bodies an older coordinator
// decodes strictly: their version travels in a header, not a member.
var schemaHeader = strconv.Itoa(messages.SchemaVersion)

// newerSubmissionDelay is how long a durable submission of a newer
// schema version waits before its next delivery, which a coordinator of
// that release may take.
const newerSubmissionDelay = 30 * time.Second

// leaveNewerSubmission leaves a durable submission of a newer schema
// version for a coordinator of that release: a delayed nak, never a
// rejection. It reports whether it did.
func (c *Coordinator) leaveNewerSubmission(m jetstream.Msg) bool {
	v, err := wire.SchemaOfHeader(m.Headers().Get(messages.HeaderSchema))
	if err != nil || v.Check("a durable submission") == nil {
		return false // a bad header is the submission's problem: intake rejects it as it would
	}
	c.log.Warn().Err(v.Check("a durable submission")).Dur("delay", newerSubmissionDelay).Msg("durable submission left for a coordinator of a newer release")
	_ = m.NakWithDelay(newerSubmissionDelay)
	return true
}

// leaveNewer leaves a result written in a newer schema version than this
// coordinator reads (docs/contract.md §8): it is not counted, so the
// job's counts never take a result misread, and the job does not end on
// it. The result stays in the results stream: a coordinator of the newer
// release that leads later reads the job's results from the start and
// counts it. Logged once per job.
func (r *jobRunner) leaveNewer(err error) {
	r.mu.Lock()
	first := !r.leftNewer
	r.leftNewer = true
	r.mu.Unlock()
	if first {
		r.log.Error().Err(err).Msg("results of a newer release left uncounted: the job waits for a coordinator of that release")
	}
}
