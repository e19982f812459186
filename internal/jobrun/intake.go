package jobrun

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/intake"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The durable intake (internal/intake) takes in the submissions of the
// jobs stream while this coordinator leads, and bounds the open jobs
// (docs/security.md, "Limits"): each open job is a runner, bounded so that
// no submitter can make the coordinator hold an unbounded number of them.
// It reaches the jobs only through intakeJobs. Which pools a job may name
// is internal/poolset's.

// intakeAckWait is the intake consumer's AckWait: how long a submission
// stays with a coordinator that stopped answering for it (heartbeats keep
// a long acceptance alive). A variable for tests.
var intakeAckWait = 30 * time.Second

// newIntake returns the coordinator's intake, started in each leadership
// term (lead).
func (c *Coordinator) newIntake() *intake.Intake {
	return intake.New(intake.Config{JetStream: c.js, Conn: c.nc, Names: c.names, Jobs: intakeJobs{c},
		AckWait: intakeAckWait, MaxDeliveries: c.cfg.IntakeMaxDeliveries, MaxOpenJobs: c.cfg.MaxOpenJobs,
		Clock: c.cfg.hooks.Clock, Tracer: c.tr, Logger: c.log})
}

// openJobsFull says why no job may be accepted now ("" if one may).
func (c *Coordinator) openJobsFull() string {
	if n := c.intake.OpenJobs(); n >= c.cfg.MaxOpenJobs {
		return fmt.Sprintf("%d jobs are open (pending or running); the limit is %d (--max-open-jobs): submit again when some have finished", n, c.cfg.MaxOpenJobs)
	}
	return ""
}

// intakeJobs is the face of the coordinator's jobs the intake takes
// (internal/intake): a submission's acceptance and rejection, and the
// open jobs the index counts.
type intakeJobs struct{ c *Coordinator }

func (j intakeJobs) Accept(ctx context.Context, data []byte, seq uint64, g intake.Gate) error {
	return j.c.accept(ctx, data, seq, g)
}

func (j intakeJobs) Reject(ctx context.Context, seq uint64, data []byte, problems []messages.FieldError) error {
	c := j.c
	return c.reject(ctx, seq, rejectedID(data, seq, c.cfg.MaxSpecBytes), problems, c.cfg.hooks.Clock.Now())
}

func (j intakeJobs) LeaveNewer(m jetstream.Msg) bool { return j.c.leaveNewerSubmission(m) }

func (j intakeJobs) Unfinished() int { return j.c.index.unfinishedCount() }
