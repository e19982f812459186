// Package jobspec reads jetfleet job specs written in YAML or JSON.
//
// It is the only place where YAML is decoded, so that package messages, which
// holds the spec types and their strict decoder, depends on the standard
// library alone. A YAML document (YAML 1.2, via go.yaml.in/yaml/v3) is
// converted into a generic tree — duplicate keys, non-string keys, NaN and
// infinities rejected, merge keys (<<) and aliases expanded within bounds,
// timestamps kept as strings, numbers kept as written — and handed to
// [messages.DecodeJobSpec], so YAML and JSON specs with the same content
// decode to identical structs.
//
// Every problem is reported at once, with the field path and the line it
// is on:
//
//	agent_template[1].timeout (line 12): invalid duration "5 seconds": unknown unit "seconds" (...)
//	agent_template[0].retyr_config (line 7): unknown field (did you mean "retry_config"?)
//
// [ToJSON] turns a YAML spec into the canonical JSON the jobs.submit API
// takes, and [ParseRetryConfig] reads a standalone retry_config document
// (for `fleetctl backoff plan --config FILE`).
//
// The functions of this package are safe for concurrent use.
package jobspec
