// Package expr parses and evaluates the boolean expressions of Prodigy's
// workflows (a map phase's `filter`) against JSON values, and the paths
// and sort orders around them (`sort_by`, `distinct`).
//
// An expression is parsed once (Parse) and evaluated many times (Eval)
// against a Lookup, which resolves field paths: JSON(v) looks them up in
// a JSON value decoded with json.Decoder.UseNumber (an item), and callers
// with other variables supply their own.
//
// # Grammar
//
//	expr     = or
//	or       = and { ("||" | "OR") and }
//	and      = not { ("&&" | "AND") not }
//	not      = ("!" | "NOT") not | compare
//	compare  = operand [ cmpop operand | ["NOT"] "in" list ]
//	cmpop    = "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
//	         | "contains" | "starts_with" | "ends_with" | "matches"
//	operand  = literal | call | path | "(" expr ")"
//	call     = name "(" [ expr { "," expr } ] ")"
//	list     = "[" [ literal { "," literal } ] "]"
//	literal  = 'text' | "text" | number | "true" | "false" | "null"
//	path     = name { "." name | "[" digits "]" }
//	name     = letter or "_", then letters, digits, "_" or "-"
//
// Keywords (AND, OR, NOT, in, true, false, null) are matched without
// regard to case. Strings have no escapes: a string ends at the next quote
// of its kind, so a YAML "path matches '\\.rs$'" is the regular expression
// \.rs$. Functions: is_null, is_not_null, is_number, is_string, is_bool,
// is_array, is_object (one path each), length (of a string in bytes, an
// array or an object; Prodigy's two-argument length(p, n) is length(p) ==
// n), contains, starts_with, ends_with and matches (a string and a
// pattern, RE2 syntax).
//
// # Values
//
// As in Prodigy: a path that is not there is missing; missing and null
// are equal to null and to each other, and to nothing else. Ordering
// compares two numbers (as float64) or two strings (bytewise); anything
// else is false. Numbers are equal when their values are (1 == 1.0, where
// Prodigy compares their spellings). `in` is equality with any element of
// its list (Prodigy compares the list's elements as strings only). A path
// whose first name is item, when the value has no field "item", starts at
// the value itself (`item.score >= 5` is `score >= 5`). An operand in a
// boolean position is true when it is the JSON value true.
package expr
