// Package replay runs the coordinator's durable DLQ replays (docs/dlq.md):
// a replay's record in the control bucket (key replay.<id>), created by
// dlq.replay on any coordinator (Start), followed by every coordinator's
// watch (Keep), run by the leader (Run) over internal/dlq's Replayer, and
// the holds that keep the jobs a replay reopens from completing while it
// runs.
//
// It owns the replay records and the holds, nothing else. It may not
// touch a job's record or runner: reopening a job for an entry is the
// Replayer's ReopenFunc, which internal/jobrun gives it (replayreopen.go,
// where a replay reopens a job), and it reaches the jobs only through the
// narrow Jobs interface (let a released job complete, publish an event,
// forget the pools it looked up).
package replay
