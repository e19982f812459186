package expand

import (
	"strconv"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/spec"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DefaultJSONPath selects the elements of a top-level array; it is used
// when a spec has an input and no json_path.
const DefaultJSONPath = messages.DefaultJSONPath

// query is a parsed json_path. When names is non-nil the query has the
// streamable form $.n1.n2…[*]: the elements of the array reached through
// the object fields names (possibly none: $[*]).
type query struct {
	expr   string
	path   *jsonpath.Path
	names  []string
	stream bool
}

// parseQuery parses expr (DefaultJSONPath when empty) as an RFC 9535
// JSONPath query and decides whether it can be streamed.
func parseQuery(expr string) (*query, error) {
	if expr == "" {
		expr = DefaultJSONPath
	}
	p, err := jsonpath.Parse(expr)
	if err != nil {
		return nil, wrapf(ErrJSONPath, err, "json_path %s", expr)
	}
	q := &query{expr: expr, path: p}
	if names, ok := streamable(p.Query().Segments()); ok {
		q.names, q.stream = names, true
		return q, nil
	}
	for _, seg := range p.Query().Segments() {
		for _, sel := range seg.Selectors() {
			if f, ok := sel.(*spec.FilterSelector); ok {
				if err := checkFilter(expr, f); err != nil {
					return nil, err
				}
			}
		}
	}
	if p.Query().Singular() != nil {
		return nil, errorf(ErrJSONPath,
			"json_path %s selects a single value, not a list of items; to take the elements of an array write %s[*]",
			expr, expr)
	}
	return q, nil
}

// streamable reports whether segs are zero or more single-name child
// segments followed by one wildcard child segment ([*] or .*), and returns
// the names.
func streamable(segs []*spec.Segment) ([]string, bool) {
	if len(segs) == 0 {
		return nil, false
	}
	names := make([]string, 0, len(segs)-1)
	for i, seg := range segs {
		sels := seg.Selectors()
		if seg.IsDescendant() || len(sels) != 1 {
			return nil, false
		}
		last := i == len(segs)-1
		switch s := sels[0].(type) {
		case spec.Name:
			if last {
				return nil, false
			}
			names = append(names, string(s))
		case spec.WildcardSelector:
			if !last {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return names, true
}

// CheckJSONPath validates a json_path as a spec validator would: it reports
// whether the query is streamed (read one item at a time) or needs the whole
// input in memory, or why it is not acceptable. "" means DefaultJSONPath.
func CheckJSONPath(expr string) (streamed bool, err error) {
	q, err := parseQuery(expr)
	if err != nil {
		return false, err
	}
	return q.stream, nil
}

// location names the value reached by names[:n] for error messages: "the
// input" for the root, otherwise a JSONPath such as $.a["b c"].
func location(names []string, n int) string {
	if n == 0 {
		return "the input"
	}
	s := "$"
	for _, name := range names[:n] {
		if isIdent(name) {
			s += "." + name
		} else {
			s += "[" + strconv.Quote(name) + "]"
		}
	}
	return s
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
