// Package expand turns a job spec into its stream of work items: inline
// items, or the items a json_path selects in an input file or object-store
// object, each with its id (id_field, else its index) and group (group_by).
//
// Inputs are streamed for the usual json_path forms ($[*], $.items[*],
// $.a.b[*]): a job of a million items is read one item at a time and never
// sits in memory whole. Other JSONPath queries (filters, recursive descent,
// slices, unions) are evaluated with github.com/theory/jsonpath, an RFC 9535
// implementation, on the whole document in memory, up to a size limit.
//
// The coordinator calls Count, a validating first pass that counts items
// per group before anything is published, then Open and Next (or All) to
// publish. Both passes detect duplicate item ids with a set of 64-bit
// hashes, and confirm a hit by reading the items again, so memory grows by
// about 20 bytes per item whatever the ids' length.
package expand
