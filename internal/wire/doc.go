// Package wire holds the parts of jetfleet's wire contract that only its
// own processes (coordinator, agents, DLQ mover, dashboard, fleetctl)
// read or write: the work message (WorkItem, its signed bytes and the
// signature's encoding, its fast decoder), an item's retry state in the
// items bucket (ItemState), a job's record in the jobs bucket
// (JobRecord), a pause key's value (PauseRecord), the encoders that fit a
// work item, result, retry state or dead letter under the server's
// max_payload, the results-batch codec, the KV keys and message
// de-duplication ids, the ${...} template engine of steps (ParseTemplate,
// Template.Render) and the headers of the park streams' message
// schedules.
//
// What a user of jetfleet sees — the job spec, API requests and replies,
// job statuses, dead-letter entries, events and the names of subjects,
// streams and buckets — is package messages', which this package builds
// on and which never imports it.
package wire
