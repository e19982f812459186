package expr

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SortKey is one key of a sort order: `score DESC NULLS FIRST`.
type SortKey struct {
	Path       Path
	Desc       bool
	NullsFirst bool
}

// ParseSortBy parses Prodigy's sort_by: keys separated by commas, each a
// path followed by ASC or DESC (ASCENDING, DESCENDING; default ASC) and
// NULLS FIRST or NULLS LAST (default LAST, whatever the direction), any
// case.
func ParseSortBy(s string) ([]SortKey, error) {
	if len(s) > MaxSourceBytes {
		return nil, &SyntaxError{Src: s[:64] + "...", Msg: fmt.Sprintf("is %d bytes long, the limit is %d", len(s), MaxSourceBytes)}
	}
	var keys []SortKey
	off := 0
	for _, spec := range strings.Split(s, ",") {
		words := strings.Fields(spec)
		pos := off + strings.Index(spec, strings.TrimSpace(spec))
		off += len(spec) + 1
		if len(words) == 0 {
			return nil, &SyntaxError{Src: s, Pos: pos, Msg: "empty sort key (write field [ASC|DESC] [NULLS FIRST|LAST], separated by commas)"}
		}
		p, err := ParsePath(words[0])
		if err != nil {
			return nil, &SyntaxError{Src: s, Pos: pos, Msg: fmt.Sprintf("sort key %q: %v", words[0], err)}
		}
		k := SortKey{Path: p}
		rest := words[1:]
		if len(rest) > 0 {
			switch strings.ToUpper(rest[0]) {
			case "DESC", "DESCENDING":
				k.Desc, rest = true, rest[1:]
			case "ASC", "ASCENDING":
				rest = rest[1:]
			}
		}
		if len(rest) >= 2 && strings.EqualFold(rest[0], "NULLS") {
			switch strings.ToUpper(rest[1]) {
			case "FIRST":
				k.NullsFirst, rest = true, rest[2:]
			case "LAST":
				rest = rest[2:]
			}
		}
		if len(rest) > 0 {
			return nil, &SyntaxError{Src: s, Pos: pos, Msg: fmt.Sprintf("sort key %q: unexpected %q (write field [ASC|DESC] [NULLS FIRST|LAST])", strings.TrimSpace(spec), strings.Join(rest, " "))}
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// CompareBy compares two values under keys, as Prodigy sorts: per key,
// missing and null values go last (first with NULLS FIRST) whatever the
// direction; others compare by Compare, reversed for DESC. Sorting with
// it must be stable (slices.SortStableFunc) to keep Prodigy's order among
// equal items.
func CompareBy(keys []SortKey, a, b Lookup) int {
	for _, k := range keys {
		av, aok := a(k.Path)
		bv, bok := b(k.Path)
		an, bn := !aok || av == nil, !bok || bv == nil
		var c int
		switch {
		case an && bn:
		case an:
			c = 1
			if k.NullsFirst {
				c = -1
			}
		case bn:
			c = -1
			if k.NullsFirst {
				c = 1
			}
		default:
			c = Compare(av, bv)
			if k.Desc {
				c = -c
			}
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// Compare orders two JSON values as Prodigy's sort does: booleans false
// first, numbers by value, strings bytewise, arrays and objects by their
// length, and values of different types by type (null, bool, number,
// string, array, object).
func Compare(a, b any) int {
	ta, tb := typeRank(a), typeRank(b)
	if ta != tb {
		return ta - tb
	}
	switch x := a.(type) {
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case string:
		return strings.Compare(x, b.(string))
	case []any:
		return len(x) - len(b.([]any))
	case map[string]any:
		return len(x) - len(b.(map[string]any))
	}
	if c, ok := order(a, b); ok {
		return c
	}
	return 0
}

func typeRank(v any) int {
	switch v.(type) {
	case nil:
		return 0
	case bool:
		return 1
	case string:
		return 3
	case []any:
		return 4
	case map[string]any:
		return 5
	}
	if _, ok := number(v); ok {
		return 2
	}
	return 6
}

// DistinctKey is the key Prodigy's distinct compares: the value's JSON
// text, "null" for null and for a missing value.
func DistinctKey(look Lookup, p Path) string {
	v, ok := look(p)
	if !ok || v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(b)
}
