package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrSyntax is wrapped by every parse error (a *SyntaxError).
var ErrSyntax = errors.New("expr: invalid expression")

// MaxSourceBytes bounds the length of an expression.
const MaxSourceBytes = 4096

// maxDepth bounds the nesting of an expression (parentheses and !).
const maxDepth = 100

// SyntaxError is a problem of an expression's source, at a byte offset.
type SyntaxError struct {
	Src string
	Pos int
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("at offset %d of %q: %s", e.Pos, e.Src, e.Msg)
}

// Unwrap makes errors.Is(err, ErrSyntax) hold.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// Expr is a parsed expression. It is immutable and safe for concurrent use.
type Expr struct {
	src  string
	root node
}

// String returns the source the expression was parsed from.
func (e *Expr) String() string { return e.src }

// Paths returns every field path the expression reads, in source order.
func (e *Expr) Paths() []Path {
	var out []Path
	var walk func(n node)
	walk = func(n node) {
		switch x := n.(type) {
		case pathNode:
			out = append(out, x.p)
		case *unary:
			walk(x.x)
		case *binary:
			walk(x.l)
			walk(x.r)
		case *call:
			for _, a := range x.args {
				walk(a)
			}
		case *inList:
			walk(x.x)
		}
	}
	walk(e.root)
	return out
}

// Eval evaluates the expression as a condition: true when its value is
// the JSON value true.
func (e *Expr) Eval(look Lookup) bool {
	v, ok := e.root.eval(look)
	b, isBool := v.(bool)
	return ok && isBool && b
}

// Value evaluates the expression and returns its value; ok is false when
// it reads a path that is not there (or is a comparison's missing side).
func (e *Expr) Value(look Lookup) (v any, ok bool) { return e.root.eval(look) }

// Parse parses a condition of the grammar in the package documentation.
func Parse(src string) (*Expr, error) {
	if len(src) > MaxSourceBytes {
		return nil, &SyntaxError{Src: src[:64] + "...", Msg: fmt.Sprintf("is %d bytes long, the limit is %d", len(src), MaxSourceBytes)}
	}
	lx := &lexer{src: src}
	toks, err := lx.all()
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	if p.peek().kind == tokEOF {
		return nil, &SyntaxError{Src: src, Msg: "empty expression"}
	}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errAt(t, "unexpected %s (expected &&, ||, AND, OR or the end)", t)
	}
	return &Expr{src: src, root: root}, nil
}

// ---- the tree ----

type node interface {
	eval(look Lookup) (any, bool)
}

type literal struct{ v any }

func (n literal) eval(Lookup) (any, bool) { return n.v, true }

type pathNode struct{ p Path }

func (n pathNode) eval(look Lookup) (any, bool) { return look(n.p) }

type unary struct{ x node } // !x

func (n *unary) eval(look Lookup) (any, bool) {
	v, ok := n.x.eval(look)
	b, isBool := v.(bool)
	return !(ok && isBool && b), true
}

type binary struct {
	op   string // && || == != < <= > >= contains starts_with ends_with matches
	l, r node
	re   *regexp.Regexp // matches with a literal pattern, compiled once
}

func truth(n node, look Lookup) bool {
	v, ok := n.eval(look)
	b, isBool := v.(bool)
	return ok && isBool && b
}

func (n *binary) eval(look Lookup) (any, bool) {
	switch n.op {
	case "&&":
		return truth(n.l, look) && truth(n.r, look), true
	case "||":
		return truth(n.l, look) || truth(n.r, look), true
	}
	l, lok := n.l.eval(look)
	r, rok := n.r.eval(look)
	switch n.op {
	case "==":
		return equal(l, lok, r, rok), true
	case "!=":
		return !equal(l, lok, r, rok), true
	}
	if !lok || !rok {
		return false, true
	}
	switch n.op {
	case "<", "<=", ">", ">=":
		c, ok := order(l, r)
		if !ok {
			return false, true
		}
		switch n.op {
		case "<":
			return c < 0, true
		case "<=":
			return c <= 0, true
		case ">":
			return c > 0, true
		}
		return c >= 0, true
	}
	return stringOp(n.op, n.re, l, r), true
}

func stringOp(op string, re *regexp.Regexp, l, r any) bool {
	s, ok1 := l.(string)
	pat, ok2 := r.(string)
	if !ok1 || !ok2 {
		return false
	}
	switch op {
	case "contains":
		return strings.Contains(s, pat)
	case "starts_with":
		return strings.HasPrefix(s, pat)
	case "ends_with":
		return strings.HasSuffix(s, pat)
	}
	if re == nil {
		var err error
		if re, err = regexp.Compile(pat); err != nil {
			return false // a pattern read from the item: Prodigy too matches nothing
		}
	}
	return re.MatchString(s)
}

type inList struct {
	x    node
	vals []any
	not  bool
}

func (n *inList) eval(look Lookup) (any, bool) {
	v, ok := n.x.eval(look)
	found := false
	if ok {
		for _, w := range n.vals {
			if equal(v, true, w, true) {
				found = true
				break
			}
		}
	}
	return found != n.not, true
}

type call struct {
	name string
	args []node
	re   *regexp.Regexp
}

// functions are the names a call may use, with their number of arguments.
var functions = map[string]int{
	"is_null": 1, "is_not_null": 1, "is_number": 1, "is_string": 1, "is_bool": 1, "is_array": 1, "is_object": 1,
	"length": 1, "contains": 2, "starts_with": 2, "ends_with": 2, "matches": 2,
}

func (n *call) eval(look Lookup) (any, bool) {
	v, ok := n.args[0].eval(look)
	switch n.name {
	case "is_null":
		return !ok || v == nil, true
	case "is_not_null":
		return ok && v != nil, true
	case "is_number":
		_, isNum := number(v)
		return ok && isNum, true
	case "is_string":
		_, is := v.(string)
		return ok && is, true
	case "is_bool":
		_, is := v.(bool)
		return ok && is, true
	case "is_array":
		_, is := v.([]any)
		return ok && is, true
	case "is_object":
		_, is := v.(map[string]any)
		return ok && is, true
	case "length":
		if !ok {
			return nil, false
		}
		switch x := v.(type) {
		case string:
			return json.Number(strconv.Itoa(len(x))), true
		case []any:
			return json.Number(strconv.Itoa(len(x))), true
		case map[string]any:
			return json.Number(strconv.Itoa(len(x))), true
		}
		return nil, false
	}
	r, rok := n.args[1].eval(look)
	if !ok || !rok {
		return false, true
	}
	return stringOp(n.name, n.re, v, r), true
}

// equal is Prodigy's equality: missing and null equal null and each
// other; numbers by value; other values by their JSON content.
func equal(l any, lok bool, r any, rok bool) bool {
	lnull, rnull := !lok || l == nil, !rok || r == nil
	if lnull || rnull {
		return lnull && rnull
	}
	if a, ok := number(l); ok {
		b, ok := number(r)
		return ok && a == b
	}
	switch a := l.(type) {
	case string:
		b, ok := r.(string)
		return ok && a == b
	case bool:
		b, ok := r.(bool)
		return ok && a == b
	}
	lb, err1 := json.Marshal(l)
	rb, err2 := json.Marshal(r)
	return err1 == nil && err2 == nil && string(lb) == string(rb)
}

// order compares two numbers or two strings; ok is false otherwise.
func order(l, r any) (int, bool) {
	if a, ok := number(l); ok {
		b, ok := number(r)
		switch {
		case !ok:
			return 0, false
		case a < b:
			return -1, true
		case a > b:
			return 1, true
		}
		return 0, a == b
	}
	a, ok1 := l.(string)
	b, ok2 := r.(string)
	if !ok1 || !ok2 {
		return 0, false
	}
	return strings.Compare(a, b), true
}

// ---- the parser ----

type parser struct {
	src   string
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) take() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) errAt(t token, format string, args ...any) error {
	return &SyntaxError{Src: p.src, Pos: t.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > maxDepth {
		return p.errAt(t, "nested more than %d deep", maxDepth)
	}
	return nil
}

func (p *parser) or() (node, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.peek().is("||") || p.peek().is("OR") {
		p.take()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = &binary{op: "||", l: l, r: r}
	}
	return l, nil
}

func (p *parser) and() (node, error) {
	l, err := p.not()
	if err != nil {
		return nil, err
	}
	for p.peek().is("&&") || p.peek().is("AND") {
		p.take()
		r, err := p.not()
		if err != nil {
			return nil, err
		}
		l = &binary{op: "&&", l: l, r: r}
	}
	return l, nil
}

func (p *parser) not() (node, error) {
	if t := p.peek(); t.is("!") || t.is("NOT") {
		p.take()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		x, err := p.not()
		p.depth--
		if err != nil {
			return nil, err
		}
		return &unary{x: x}, nil
	}
	return p.compare()
}

var cmpOps = []string{"==", "=", "!=", "<", "<=", ">", ">=", "contains", "starts_with", "ends_with", "matches"}

func (p *parser) compare() (node, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	negate := false
	if t.is("NOT") && p.toks[p.i+1].is("in") {
		p.take()
		t, negate = p.peek(), true
	}
	if t.is("in") {
		p.take()
		vals, err := p.list()
		if err != nil {
			return nil, err
		}
		return &inList{x: l, vals: vals, not: negate}, nil
	}
	for _, op := range cmpOps {
		if !t.is(op) {
			continue
		}
		p.take()
		r, err := p.operand()
		if err != nil {
			return nil, err
		}
		if op == "=" {
			op = "=="
		}
		b := &binary{op: op, l: l, r: r}
		if op == "matches" {
			if b.re, err = p.pattern(r); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return l, nil
}

// pattern compiles a literal regular expression once, at parse time.
func (p *parser) pattern(n node) (*regexp.Regexp, error) {
	lit, ok := n.(literal)
	if !ok {
		return nil, nil
	}
	s, ok := lit.v.(string)
	if !ok {
		return nil, p.errAt(p.toks[p.i-1], "matches takes a string pattern")
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, p.errAt(p.toks[p.i-1], "invalid regular expression %q: %v", s, err)
	}
	return re, nil
}

func (p *parser) list() ([]any, error) {
	t := p.take()
	if !t.is("[") {
		return nil, p.errAt(t, "in takes a list: [a, b, ...], got %s", t)
	}
	var vals []any
	if p.peek().is("]") {
		p.take()
		return vals, nil
	}
	for {
		t := p.take()
		v, ok, err := p.literal(t)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, p.errAt(t, "a list holds literals (strings, numbers, true, false, null), got %s", t)
		}
		vals = append(vals, v)
		switch t := p.take(); {
		case t.is(","):
		case t.is("]"):
			return vals, nil
		default:
			return nil, p.errAt(t, "expected , or ] in the list, got %s", t)
		}
	}
}

func (p *parser) literal(t token) (any, bool, error) {
	switch {
	case t.kind == tokString:
		return t.text, true, nil
	case t.kind == tokNumber:
		if _, err := strconv.ParseFloat(t.text, 64); err != nil {
			return nil, false, p.errAt(t, "invalid number %q", t.text)
		}
		return json.Number(strings.TrimPrefix(t.text, "+")), true, nil
	case t.is("true"):
		return true, true, nil
	case t.is("false"):
		return false, true, nil
	case t.is("null"):
		return nil, true, nil
	}
	return nil, false, nil
}

func (p *parser) operand() (node, error) {
	t := p.peek()
	if v, ok, err := p.literal(t); err != nil || ok {
		p.take()
		return literal{v}, err
	}
	switch {
	case t.is("("):
		p.take()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		x, err := p.or()
		p.depth--
		if err != nil {
			return nil, err
		}
		if c := p.take(); !c.is(")") {
			return nil, p.errAt(c, "expected ) to close the ( at offset %d, got %s", t.pos, c)
		}
		return x, nil
	case t.kind == tokName && p.toks[p.i+1].is("("):
		return p.call()
	case t.kind == tokName:
		path, err := p.path()
		if err != nil {
			return nil, err
		}
		return pathNode{path}, nil
	}
	return nil, p.errAt(t, "expected a field, a value, a function or (, got %s", t)
}

func (p *parser) call() (node, error) {
	name := p.take()
	p.take() // (
	n, known := functions[strings.ToLower(name.text)]
	if !known {
		return nil, p.errAt(name, "unknown function %q (use is_null, is_not_null, is_number, is_string, is_bool, is_array, is_object, length, contains, starts_with, ends_with or matches)", name.text)
	}
	c := &call{name: strings.ToLower(name.text)}
	if err := p.enter(name); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	if !p.peek().is(")") {
		for {
			a, err := p.or()
			if err != nil {
				return nil, err
			}
			c.args = append(c.args, a)
			if !p.peek().is(",") {
				break
			}
			p.take()
		}
	}
	if t := p.take(); !t.is(")") {
		return nil, p.errAt(t, "expected , or ) in %s(...), got %s", c.name, t)
	}
	if c.name == "length" && len(c.args) == 2 { // Prodigy's length(p, n): length(p) == n
		return &binary{op: "==", l: &call{name: "length", args: c.args[:1]}, r: c.args[1]}, nil
	}
	if len(c.args) != n {
		return nil, p.errAt(name, "%s takes %d argument(s), got %d", c.name, n, len(c.args))
	}
	if c.name == "matches" {
		var err error
		if c.re, err = p.pattern(c.args[1]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// path reads name { . name | [ digits ] }.
func (p *parser) path() (Path, error) {
	t := p.take()
	if t.kind != tokName {
		return nil, p.errAt(t, "expected a field name, got %s", t)
	}
	path := Path{{Field: t.text}}
	for {
		switch t := p.peek(); {
		case t.is("."):
			p.take()
			f := p.take()
			if f.kind != tokName {
				return nil, p.errAt(f, "expected a field name after the dot, got %s", f)
			}
			path = append(path, Part{Field: f.text})
		case t.is("["):
			p.take()
			n := p.take()
			idx, err := strconv.Atoi(n.text)
			if n.kind != tokNumber || err != nil || idx < 0 {
				return nil, p.errAt(n, "an index is a number >= 0, got %s", n)
			}
			if c := p.take(); !c.is("]") {
				return nil, p.errAt(c, "expected ], got %s", c)
			}
			path = append(path, Part{Index: idx})
		case t.kind == tokNumber && strings.HasPrefix(t.text, ".") && !strings.ContainsAny(t.text[1:], ".eE+-"):
			// "a.0": the lexer read ".0" as a number; an object key of digits.
			p.take()
			path = append(path, Part{Field: t.text[1:]})
		default:
			return path, nil
		}
	}
}
