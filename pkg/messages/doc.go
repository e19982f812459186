// Package messages holds jetfleet's wire contract as its users see it: the
// job spec, API requests and replies, job status, results, dead-letter
// entries, events, and the subject, stream, bucket and header names they
// travel under. What only jetfleet's own processes read or write (the work
// message, an item's retry state, the job record, KV keys, the template
// engine) is not part of it.
//
// It depends on the standard library only (and internal/jsonscan, a JSON
// validator of jetfleet's that itself imports nothing), like River's
// rivertype, so that a producer in another service can import it to build
// jobs and read statuses without pulling in nats.go or a YAML parser (see
// the example).
//
// Every type marshals to JSON with snake_case field names; the same names
// are used in YAML job specs. Durations are [Duration] values written in
// humantime form ("500ms", "2m30s", "1d"); [ParseDuration] reads them. The
// spec types with several forms (Backoff, Matcher, OnFailure,
// ItemFailureAction, ErrorCollection, BudgetValue) marshal to a canonical
// form, which their UnmarshalJSON reads back: that is how the coordinator
// stores an accepted spec and agents read it.
//
// Reading a spec a user wrote — every accepted form, strict decoding with
// the path and line of each problem, validation and defaults — is package
// jobspec's: jobspec.Parse, jobspec.Validate, jobspec.WithDefaults. Problems
// travel as [FieldError] values (in API errors and job statuses), and a
// list of them is a *[ValidationError].
package messages
