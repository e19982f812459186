package messages

import (
	"time"
)

// Pause and resume (docs/jobs.md "Pause and resume").
//
// What is paused lives in the pause bucket (Names.PauseBucket): a key per
// paused job ("job.<id>") or pool ("pool.<pool>"), deleted on resume. The
// coordinators and the agents watch it. While a job or its pool is paused
// the leader publishes none of the job's items, and an agent that gets an
// item of a paused job, or any item while its pool is paused, does not run
// it: it stores a held copy in its pool's park stream (HeldSubject, the
// work item's held count one higher) and acks the delivery, so a paused item
// holds no slot of the consumer. On resume the leader moves the held
// copies back onto the work stream.

// StatePaused is the state of a job paused by jobs.pause, or of a job of
// a pool paused by pools.pause (JobStatus.PausedBy says which).
const StatePaused = "paused"

// What paused a job (JobStatus.PausedBy).
const (
	PausedByJob  = "job"
	PausedByPool = "pool"
)

// API endpoints of pause and resume, relative to "<prefix>.api.".
const (
	// EndpointJobsPause pauses a job (JobRequest; StatusReply).
	EndpointJobsPause = "jobs.pause"
	// EndpointJobsResume resumes a paused job (JobRequest; StatusReply).
	EndpointJobsResume = "jobs.resume"
	// EndpointPoolsPause pauses every job of a pool (PoolRequest; PoolPauseReply).
	EndpointPoolsPause = "pools.pause"
	// EndpointPoolsResume resumes a paused pool (PoolRequest; PoolPauseReply).
	EndpointPoolsResume = "pools.resume"
)

// PoolRequest names one pool.
type PoolRequest struct {
	Pool string `json:"pool"`
}

// PoolPauseReply answers pools.pause and pools.resume: whether the pool is
// paused now, and since when.
type PoolPauseReply struct {
	ErrorReply
	Pool   string     `json:"pool"`
	Paused bool       `json:"paused"`
	Since  *time.Time `json:"since,omitempty"`
}

// PauseBucket holds what is paused: a "job.<id>" key per paused job and a
// "pool.<pool>" key per paused pool.
func (n Names) PauseBucket() string { return n.prefix() + "_pause" }

// heldSuffix ends a held copy's subject, beside the item's schedule
// subject (wire.ParkSubject in internal/wire), so that the pool's agents may publish it and a
// job's purge of its parked items (wire.JobParkFilters) takes it too.
const heldSuffix = ".held"
