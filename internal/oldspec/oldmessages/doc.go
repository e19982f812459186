// Package messages holds jetfleet's wire contract: the job spec, work items,
// results, dead-letter entries, job status, API requests and replies, and the
// subject, stream, bucket and header names they travel under.
//
// It depends on the standard library only, so a producer in another service
// can import it to build and validate jobs without pulling in nats.go.
//
// Every type marshals to JSON with snake_case field names; the same names are
// used in YAML job specs (see package jobspec for YAML decoding). Durations
// are [Duration] values written in humantime form ("500ms", "2m30s", "1d").
//
// Decoding is strict: [ParseJobSpec] rejects unknown fields, bad durations,
// invalid regexes and out-of-range values, and reports every problem at once
// with the path of the field it concerns, for example
//
//	agent_template[1].retry_config.retry_on[2].pattern: invalid regex: missing closing )
//
// [DecodeJobSpec] applies the same decoder to a generic tree (how package
// jobspec reads YAML); [JobSpec.Validate] checks a spec built in code;
// [JobSpec.WithDefaults] returns the spec as accepted, with every default
// filled in. The polymorphic spec types (Backoff, Matcher, OnFailure,
// ItemFailureAction, ErrorCollection, BudgetValue) marshal to a canonical
// form, so that a marshalled spec parses back to an equal one. See
// docs/job-spec.md for the accepted forms, the rules and the defaults.
package oldmessages
