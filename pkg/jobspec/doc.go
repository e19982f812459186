// Package jobspec reads jetfleet job specs written in YAML or JSON: it
// decodes them strictly, validates them and fills in their defaults. The
// types it fills are package messages' wire types, which depend on the
// standard library alone.
//
// One front end serves both formats. A YAML document (YAML 1.2, via
// go.yaml.in/yaml/v3) is parsed into a yaml.Node tree; a JSON document is
// tokenized by encoding/json, whose grammar is exactly JSON's, into the same
// kind of tree. One converter turns that tree into plain values with the
// line of every field — duplicate keys, non-string keys, NaN and
// infinities refused, merge keys (<<) and aliases expanded within bounds,
// timestamps kept as strings, numbers kept as written — and one decoder
// fills the spec, so YAML and JSON specs with the same content decode to
// identical structs.
//
// Every problem is reported at once, with the field path and, when the
// document spans several lines, the line it is on:
//
//	agent_template[1].timeout (line 12): invalid duration "5 seconds": unknown unit "seconds" (...)
//	agent_template[0].retyr_config (line 7): unknown field (did you mean "retry_config"?)
//
// [Parse] and [ParseFile] read a spec, [ToJSON] turns a YAML spec into the
// canonical JSON the jobs.submit API takes, [ParseRetryConfig] reads a
// standalone retry_config document (for `fleetctl backoff plan --config
// FILE`). [Validate] checks a spec built in code and [WithDefaults] returns
// the spec as accepted, every default filled in. See docs/job-spec.md for
// the accepted forms, the rules and the defaults.
//
// The functions of this package are safe for concurrent use.
package jobspec
