package expand

import (
	"context"

	"github.com/theory/jsonpath/spec"
)

// evaluator selects a json_path's nodes from a decoded document the way
// jsonpath.Path.Select does (RFC 9535: each segment applied to every node
// the previous one selected, a descendant segment to every node below it
// too), but counts its work against a budget and stops when it runs out.
// jsonpath.Path.Select materialises each segment's whole result before
// anyone can look: `$..*..*..*..*` selects 455,000 nodes from a 120-byte
// document, and one more `..*` tens of millions.
//
// The work counted: every node selected (duplicates too: a union repeats
// nodes), every node a descendant segment visits, and for a filter, each
// node it tests, or, when the filter's own queries may go deeper than one
// node (wildcards, nested filters), the whole subtree below the node it
// filters. Filters whose queries could repeat nodes without bound
// (descendant segments, unions) are refused when the path is parsed; see
// checkFilter.
type evaluator struct {
	ctx    context.Context
	root   any
	left   int64
	steps  int
	broken error
	simple map[*spec.FilterSelector]bool
}

// errBudget marks the evaluation out of budget; select turns it into the
// caller's error.
type errBudget struct{}

func (errBudget) Error() string { return "json_path evaluation budget exhausted" }

// selectBounded evaluates q on doc within budget nodes.
func selectBounded(ctx context.Context, q *query, doc any, budget int64) (nodes []any, err error) {
	defer func() {
		// github.com/theory/jsonpath v0.10.0 panics in match() and search()
		// when their first argument selects nothing; no input may end the
		// coordinator.
		if p := recover(); p != nil {
			nodes, err = nil, errorf(ErrJSONPath, "json_path %s cannot be evaluated on this input: %v", q.expr, p)
		}
	}()
	e := &evaluator{ctx: ctx, root: doc, left: budget, simple: map[*spec.FilterSelector]bool{}}
	res := []any{doc}
	for _, seg := range q.path.Query().Segments() {
		var next []any
		for _, v := range res {
			next = e.segment(seg, v, next)
			if e.broken != nil {
				return nil, e.fail(q, budget)
			}
		}
		res = next
	}
	return res, nil
}

func (e *evaluator) fail(q *query, budget int64) error {
	if _, ok := e.broken.(errBudget); ok {
		return errorf(ErrPathTooCostly,
			"json_path %s selects or visits more than %d nodes of the input (the coordinator's limit, --max-path-nodes); use a path of the form $.a.b[*], which is read one item at a time, or a narrower query",
			q.expr, budget)
	}
	return e.broken
}

// spend takes n from the budget; it reports false (and sets broken) when
// the budget or ctx is exhausted.
func (e *evaluator) spend(n int) bool {
	e.left -= int64(n)
	if e.left < 0 {
		e.broken = errBudget{}
		return false
	}
	if e.steps++; e.steps%1024 == 0 {
		if err := e.ctx.Err(); err != nil {
			e.broken = err
			return false
		}
	}
	return true
}

// segment appends to out what seg selects from v, as spec.Segment.Select
// does: each selector on v, then, for a descendant segment, on every node
// below v, depth first.
func (e *evaluator) segment(seg *spec.Segment, v any, out []any) []any {
	for _, sel := range seg.Selectors() {
		if f, ok := sel.(*spec.FilterSelector); ok {
			if e.isSimple(f) {
				e.spend(children(v))
			} else {
				e.walk(v)
			}
			if e.broken != nil {
				return out
			}
		}
		got := sel.Select(v, e.root)
		if !e.spend(1 + len(got)) {
			return out
		}
		out = append(out, got...)
	}
	if !seg.IsDescendant() {
		return out
	}
	switch val := v.(type) {
	case []any:
		for _, c := range val {
			if out = e.segment(seg, c, out); e.broken != nil {
				return out
			}
		}
	case map[string]any:
		for _, c := range val {
			if out = e.segment(seg, c, out); e.broken != nil {
				return out
			}
		}
	}
	return out
}

// children is the number of v's children.
func children(v any) int {
	switch val := v.(type) {
	case []any:
		return len(val)
	case map[string]any:
		return len(val)
	}
	return 0
}

// walk spends one unit per node below v, stopping when the budget runs
// out (with broken set).
func (e *evaluator) walk(v any) {
	switch val := v.(type) {
	case []any:
		for _, c := range val {
			if !e.spend(1) {
				return
			}
			if e.walk(c); e.broken != nil {
				return
			}
		}
	case map[string]any:
		for _, c := range val {
			if !e.spend(1) {
				return
			}
			if e.walk(c); e.broken != nil {
				return
			}
		}
	}
}

// isSimple is simpleFilter, remembered per filter.
func (e *evaluator) isSimple(f *spec.FilterSelector) bool {
	simple, ok := e.simple[f]
	if !ok {
		simple = simpleFilter(f)
		e.simple[f] = simple
	}
	return simple
}

// checkFilter refuses a filter whose queries could repeat nodes without a
// bound the evaluator can count (it cannot see inside a filter): a
// descendant segment (`@..x`: every node below each node tested, and so
// quadratic in the input) or a union (`@[*,*]`: every node twice, and
// twice again per segment).
func checkFilter(expr string, f *spec.FilterSelector) error {
	s := f.String()
	var brackets []byte // '[' and '(' open
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\'':
			i = skipString(s, i)
		case '[', '(':
			brackets = append(brackets, c)
		case ']', ')':
			if len(brackets) > 0 {
				brackets = brackets[:len(brackets)-1]
			}
		case '.':
			if i+1 < len(s) && s[i+1] == '.' {
				return errorf(ErrJSONPath, "json_path %s: a filter may not use a descendant segment (..): it would test every node below every node, quadratic in the input", expr)
			}
		case ',':
			if len(brackets) > 0 && brackets[len(brackets)-1] == '[' {
				return errorf(ErrJSONPath, "json_path %s: a filter may not use a union ([a,b]): it repeats nodes for every selector", expr)
			}
		}
	}
	return nil
}

// simpleFilter reports whether f's queries only name fields and indexes
// (no wildcard, slice or nested filter): testing a node then costs about
// one step.
func simpleFilter(f *spec.FilterSelector) bool {
	s := f.String()
	depth := 0
	for i := 1; i < len(s); i++ { // s[0] is the filter's own '?'
		switch c := s[i]; c {
		case '"', '\'':
			i = skipString(s, i)
		case '[':
			depth++
		case ']':
			depth--
		case '*', '?':
			return false
		case ':':
			if depth > 0 {
				return false
			}
		}
	}
	return true
}

// skipString returns the index of the quote closing the string that
// starts at s[i].
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return i
		}
	}
	return i
}
