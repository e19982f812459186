package shell

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// How Compile finds a reference's context: every reference is replaced by
// a placeholder, a plain word such as JFREF3Z that no shell reads specially,
// and the resulting script is parsed as bash and as POSIX sh. The syntax
// node each placeholder lands in, and the chain of nodes above it, say how
// its value must be written (a quoted word, inside "...", inside '...', a
// comment) or why it cannot be (arithmetic, a variable name, eval, ...).
// Where the two readings disagree, the reference is refused.

// probe is a template with its references replaced by placeholders.
type probe struct {
	src  string
	refs []probeRef
}

type probeRef struct {
	off, end int // the placeholder's bytes in src
	text     string
	trusted  bool // an agent-made number (trustedNumber)
	line     int  // 1-based line of the reference in the template
}

func newProbe(t wire.Template) *probe {
	nonce := "JFREF"
	for _, p := range t.Parts {
		for p.Ref == nil && strings.Contains(p.Literal, nonce) {
			nonce += "X"
		}
	}
	pr := &probe{}
	var b strings.Builder
	line := 1
	for _, p := range t.Parts {
		if p.Ref == nil {
			b.WriteString(p.Literal)
			line += strings.Count(p.Literal, "\n")
			continue
		}
		ph := nonce + strconv.Itoa(len(pr.refs)) + "Z"
		off := b.Len()
		b.WriteString(ph)
		pr.refs = append(pr.refs, probeRef{off: off, end: off + len(ph), text: refText(p.Ref), trusted: trustedNumber(p.Ref) && p.Default == nil, line: line})
		line += strings.Count(refText(p.Ref), "\n")
	}
	pr.src = b.String()
	return pr
}

// decision is how one reference is written, or why it cannot be.
type decision struct {
	enc     encoding
	refusal error
	line    int
}

// analyse decides every reference of the probe.
func (pr *probe) analyse() ([]decision, error) {
	bash, berr := parse(pr.src, syntax.LangBash)
	if berr != nil {
		return nil, pr.syntaxError(berr)
	}
	ds, _ := pr.decide(bash, true)
	// POSIX shells such as dash run a script command by command and stop
	// at the first they cannot parse: compare the commands before it.
	posix, complete := parsePrefix(pr.src, syntax.LangPOSIX)
	pds, placed := pr.decide(posix, false)
	for i := range ds {
		switch {
		case ds[i].refusal != nil:
		case !placed[i]:
			// After the command POSIX sh cannot parse: only bash runs it.
		case pds[i].refusal != nil:
			ds[i].refusal = pds[i].refusal
		case pr.refs[i].trusted && (ds[i].enc == encBare && pds[i].enc == encWord || ds[i].enc == encWord && pds[i].enc == encBare):
			ds[i].enc = encBare // a number: a word wherever either shell reads arithmetic
		case ds[i].enc != pds[i].enc:
			ds[i].refusal = fmt.Errorf("bash and POSIX sh read this position differently (%s for bash, %s for sh)", ds[i].enc, pds[i].enc)
		}
	}
	if !complete {
		// Where POSIX sh gives up can depend on how it read bash's $'...'
		// (as $ and '...'): nothing after one is trusted.
		first := -1
		syntax.Walk(bash, func(n syntax.Node) bool {
			if q, ok := n.(*syntax.SglQuoted); ok && q.Dollar && (first < 0 || int(q.Pos().Offset()) < first) {
				first = int(q.Pos().Offset())
			}
			return true
		})
		for i, r := range pr.refs {
			if first >= 0 && r.off > first && ds[i].refusal == nil {
				ds[i].refusal = errors.New("it follows bash's $'...' quoting, which POSIX shells such as dash read differently")
			}
		}
	}
	pr.taint(bash, ds)
	for i := range ds {
		ds[i].line = pr.refs[i].line
	}
	return ds, nil
}

func (e encoding) String() string {
	switch e {
	case encWord:
		return "a word"
	case encSingle:
		return "inside '...'"
	case encDouble:
		return `inside "..."`
	case encLiteral:
		return "a comment"
	case encHdoc:
		return "a here-document's text"
	default:
		return "arithmetic"
	}
}

func parse(src string, lang syntax.LangVariant) (*syntax.File, error) {
	return syntax.NewParser(syntax.Variant(lang), syntax.KeepComments(true)).Parse(strings.NewReader(src), "")
}

// parsePrefix parses the statements of src up to the first that does not
// parse; complete reports whether that is all of them.
func parsePrefix(src string, lang syntax.LangVariant) (f *syntax.File, complete bool) {
	f = &syntax.File{}
	complete = true
	for st, err := range syntax.NewParser(syntax.Variant(lang), syntax.KeepComments(true)).StmtsSeq(strings.NewReader(src)) {
		if err != nil {
			complete = false
			break
		}
		f.Stmts = append(f.Stmts, st)
	}
	return f, complete
}

func (pr *probe) syntaxError(err error) error {
	msg := err.Error()
	var pe syntax.ParseError
	if errors.As(err, &pe) {
		msg = fmt.Sprintf("line %d: %s", pe.Pos.Line(), pe.Text)
	}
	var lerr syntax.LangError
	if errors.As(err, &lerr) {
		msg = fmt.Sprintf("line %d: %s", lerr.Pos.Line(), lerr.Feature+" is not supported")
	}
	// Placeholders are longer than references: a column would mislead.
	for _, r := range pr.refs {
		msg = strings.ReplaceAll(msg, pr.src[r.off:r.end], r.text)
	}
	return fmt.Errorf("%w (%s), so where its references stand cannot be checked", ErrSyntax, msg)
}

// leafRange is the source range of a node that can hold a placeholder's
// text, and whether it is one.
func leafRange(n syntax.Node) (start, end int, ok bool) {
	switch n := n.(type) {
	case *syntax.Lit, *syntax.SglQuoted, *syntax.Comment:
		return int(n.Pos().Offset()), int(n.End().Offset()), true
	}
	return 0, 0, false
}

// decide places every reference in f; placed reports the references found
// in it.
func (pr *probe) decide(f *syntax.File, bash bool) (ds []decision, placed []bool) {
	ds = make([]decision, len(pr.refs))
	placed = make([]bool, len(pr.refs))
	found := make([]int, len(pr.refs))
	chains := make([][]syntax.Node, len(pr.refs))
	walkChains(f, func(chain []syntax.Node) {
		if s, e, ok := leafRange(chain[len(chain)-1]); ok {
			for i, r := range pr.refs {
				if r.off >= s && r.end <= e {
					found[i]++
					chains[i] = append([]syntax.Node(nil), chain...)
				}
			}
		}
	})
	decl := declInfo(f)
	for i, r := range pr.refs {
		placed[i] = found[i] > 0
		if found[i] != 1 {
			ds[i].refusal = errors.New("it stands where the shell parser cannot place it")
			continue
		}
		chain := chains[i]
		leaf := chain[len(chain)-1]
		j := pr.judge(chain, decl, r.off, bash)
		switch {
		case j.eval != nil && !(r.trusted && j.eval.kind == vArith):
			ds[i].refusal = j.eval.err(r.text)
			continue
		case j.quoting != nil && !(r.trusted && j.quoting.kind == vParam):
			ds[i].refusal = j.quoting.err(r.text)
			continue
		}
		switch leaf := leaf.(type) {
		case *syntax.Comment:
			ds[i].enc = encLiteral
		case *syntax.SglQuoted:
			ds[i].enc = encSingle
			if leaf.Dollar {
				ds[i].refusal = errors.New(`it is inside bash's $'...' quoting, where backslash sequences are decoded; use '...' or "..."`)
			}
		case *syntax.Lit:
			if hdocText(chain) {
				if pr.escaped(r.off) {
					ds[i].refusal = errors.New("it follows a backslash, which would escape its expansion in the here-document; remove the backslash")
					continue
				}
				ds[i].enc = encHdoc
				continue
			}
			if pr.escaped(r.off) {
				ds[i].refusal = errors.New("it follows a backslash, which would escape its quoting; remove the backslash")
				continue
			}
			ds[i].enc = encWord
			if _, inDouble := chain[len(chain)-2].(*syntax.DblQuoted); inDouble {
				ds[i].enc = encDouble
			}
			if r.trusted && (j.eval != nil || j.quoting != nil) {
				ds[i].enc = encBare
			}
		}
	}
	return ds, placed
}

// escaped reports whether the byte before off is an unescaped backslash.
func (pr *probe) escaped(off int) bool {
	n := 0
	for i := off - 1; i >= 0 && pr.src[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// verdictKind classifies why a position is unsafe.
type verdictKind uint8

const (
	vArith  verdictKind = iota + 1 // evaluated as arithmetic by bash
	vName                          // names a variable
	vEval                          // run as a command
	vParam                         // inside ${...} (quoting differs between shells)
	vSticky                        // `...`, here-documents, extended globs
	vLocale                        // inside $"..."
)

type verdict struct {
	kind verdictKind
	what string // the construct, e.g. "$((...))"
}

func (v *verdict) err(ref string) error {
	switch v.kind {
	case vArith:
		return fmt.Errorf("bash evaluates it as arithmetic in %s, which runs any $(...) in a value such as a[$(cmd)] whatever the quoting; "+
			"check that it is a number and use the checked copy: n=$(printf '%%s\\n' %s | grep -xE -- '-?[0-9]+') || exit 1", v.what, ref)
	case vName:
		return fmt.Errorf("it names a variable in %s, and bash evaluates the subscript of a name such as a[$(cmd)] whatever the quoting; use a fixed variable name", v.what)
	case vEval:
		return fmt.Errorf("it is run as a command by %s, which quoting cannot prevent; pass it as an argument of a command instead", v.what)
	case vParam:
		return fmt.Errorf("it is inside ${...}, where shells disagree about quoting; assign it to a variable first (v=%s) and use $v there", ref)
	case vLocale:
		return errors.New(`it is inside $"...", which bash translates; use "..."`)
	}
	return errors.New(v.what)
}

// judgement is what the nodes above a position say about it: eval for
// positions where the shell evaluates the value (no quoting helps), quoting
// for positions where a quoted value would not stay literal.
type judgement struct {
	eval, quoting *verdict
}

// decls are a script's variables declared integer (-i) or as namerefs (-n):
// assigning to them evaluates the value.
type decls map[string]string

func declInfo(f *syntax.File) decls {
	d := decls{}
	syntax.Walk(f, func(n syntax.Node) bool {
		dc, ok := n.(*syntax.DeclClause)
		if !ok {
			return true
		}
		what := declFlags(dc)
		if what == "" {
			return true
		}
		for _, a := range dc.Args {
			switch {
			case a.Name != nil:
				d[a.Name.Value] = what
			case a.Naked && a.Value != nil:
				if lit := a.Value.Lit(); lit != "" && !strings.HasPrefix(lit, "-") && !strings.HasPrefix(lit, "+") {
					d[lit] = what
				}
			}
		}
		return true
	})
	return d
}

// declFlags returns "declare -i" or "declare -n" (with the clause's own
// keyword) when dc makes its variables integers or namerefs, else "".
func declFlags(dc *syntax.DeclClause) string {
	kw := dc.Variant.Value
	if kw == "nameref" {
		return "nameref"
	}
	if kw != "declare" && kw != "typeset" && kw != "local" {
		return ""
	}
	for _, a := range dc.Args {
		if !a.Naked || a.Value == nil {
			continue
		}
		lit := a.Value.Lit()
		if !strings.HasPrefix(lit, "-") {
			continue
		}
		switch {
		case strings.ContainsRune(lit, 'i'):
			return kw + " -i"
		case strings.ContainsRune(lit, 'n'):
			return kw + " -n"
		}
	}
	return ""
}

// judge reads the chain of nodes from the file down to the position pos.
func (pr *probe) judge(chain []syntax.Node, d decls, pos int, bash bool) judgement {
	var j judgement
	setEval := func(kind verdictKind, what string) {
		if j.eval == nil {
			j.eval = &verdict{kind, what}
		}
	}
	setQuoting := func(kind verdictKind, what string) {
		if j.quoting == nil || j.quoting.kind != vSticky {
			j.quoting = &verdict{kind, what}
		}
	}
	for k, n := range chain {
		var child syntax.Node
		if k+1 < len(chain) {
			child = chain[k+1]
		}
		switch n := n.(type) {
		case *syntax.CmdSubst:
			if n.Backquotes {
				setQuoting(vSticky, "it is inside `...`, where backslashes are read twice and quoting cannot protect it; use $(...) instead")
			} else if j.quoting != nil && j.quoting.kind != vSticky {
				j.quoting = nil // a new command: quoting starts afresh
			}
		case *syntax.ProcSubst:
			if j.quoting != nil && j.quoting.kind != vSticky {
				j.quoting = nil
			}
		case *syntax.ArithmExp:
			if n.Bracket {
				setEval(vArith, "$[...]")
			} else {
				setEval(vArith, "$((...))")
			}
		case *syntax.ArithmCmd:
			setEval(vArith, "((...))")
		case *syntax.LetClause:
			setEval(vArith, "let")
		case *syntax.CStyleLoop:
			setEval(vArith, "for ((...))")
		case *syntax.ParamExp:
			switch {
			case child == nil && n.Excl:
				setEval(vName, "${!...}")
			case n.Index != nil && child == n.Index:
				setEval(vArith, "an array subscript")
			case n.Slice != nil && (child == n.Slice.Offset || child == n.Slice.Length):
				setEval(vArith, "${var:offset:length}")
			case child != nil:
				setQuoting(vParam, "")
			}
		case *syntax.Assign:
			switch {
			case n.Name != nil && child == syntax.Node(n.Name):
				setEval(vName, "an assignment")
			case n.Name != nil && codeVars[n.Name.Value]:
				setEval(vEval, n.Name.Value+", whose value the shell expands or runs as code")
			case n.Index != nil && child == n.Index:
				setEval(vArith, "an array subscript")
			case n.Name != nil && d[n.Name.Value] != "":
				if strings.HasSuffix(d[n.Name.Value], "-i") {
					setEval(vArith, "a variable declared with "+d[n.Name.Value])
				} else {
					setEval(vName, "a variable declared with "+d[n.Name.Value])
				}
			}
		case *syntax.ArrayElem:
			if n.Index != nil && child == n.Index {
				setEval(vArith, "an array subscript")
			}
		case *syntax.DeclClause:
			a, _ := child.(*syntax.Assign)
			switch flags := declFlags(n); {
			case a == nil:
			case a.Naked:
				// Not a NAME=value word: bash reads the argument again when
				// declare runs, as a name, an option, or an assignment that may
				// be an array's (x=(...)).
				setEval(vName, n.Variant.Value)
			case strings.HasSuffix(flags, "-i"):
				setEval(vArith, flags)
			case flags != "":
				setEval(vName, flags)
			}
		case *syntax.CallExpr:
			if w, ok := child.(*syntax.Word); ok {
				if kind, what := pr.callArg(n.Args, w, pos, bash); kind != 0 {
					setEval(kind, what)
				}
			}
		case *syntax.BinaryTest:
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				setEval(vArith, "[[ ... "+n.Op.String()+" ... ]]")
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
				setEval(vName, "[[ "+n.Op.String()+" ... ]]")
			}
		case *syntax.WordIter:
			if child == syntax.Node(n.Name) {
				setEval(vName, "a for loop")
			}
		case *syntax.FuncDecl:
			if n.Name != nil && child == syntax.Node(n.Name) {
				setEval(vName, "a function definition")
			}
		case *syntax.CoprocClause:
			if n.Name != nil && child == syntax.Node(n.Name) {
				setEval(vName, "coproc")
			}
		case *syntax.Redirect:
			switch {
			case n.N != nil && child == syntax.Node(n.N):
				setEval(vName, "a {var}> redirection")
			case (n.Op == syntax.Hdoc || n.Op == syntax.DashHdoc) && child == syntax.Node(n.Word):
				setQuoting(vSticky, "it is a here-document delimiter, which is not expanded; write the delimiter out")
			case n.Hdoc != nil && child == syntax.Node(n.Hdoc):
				quoted, ok := hdocQuoted(n)
				switch {
				case !ok:
					setQuoting(vSticky, "it is inside a here-document whose delimiter mixes quoting forms; write the delimiter as EOF")
				case quoted:
					setQuoting(vSticky, "it is inside a quoted here-document (<<'EOF'), where nothing is expanded and a value holding the delimiter's line would end it early; "+
						"write the delimiter unquoted (<<EOF), where the value is expanded from a variable")
				case k+2 != len(chain)-1:
					setQuoting(vSticky, "it is inside an expansion within a here-document, where quotes are not special; "+
						"write it in the here-document's text, or assign it to a variable first (v=\"$(...)\")")
				}
			}
		case *syntax.ExtGlob:
			setQuoting(vSticky, "it is inside an extended glob pattern, which not every shell parses")
		case *syntax.DblQuoted:
			if n.Dollar {
				setQuoting(vLocale, "")
			}
		}
	}
	return j
}

// codeVars are variables whose value a shell runs or expands as code:
// PS4 before each traced command (set -x), the prompts and PROMPT_COMMAND,
// BASH_ENV and ENV when a shell starts.
var codeVars = map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true, "BASH_ENV": true, "ENV": true}

// afterEquals reports whether pos comes after an "=" in word w: in the
// value of a NAME=value argument of declare, export and the like.
func (pr *probe) afterEquals(w *syntax.Word, pos int) bool {
	if w == nil {
		return false
	}
	start := int(w.Pos().Offset())
	return start <= pos && pos <= len(pr.src) && strings.Contains(pr.src[start:pos], "=")
}

// callArg says whether the argument w of a simple command, holding pos, is
// evaluated by the builtin it is given to.
func (pr *probe) callArg(args []*syntax.Word, w *syntax.Word, pos int, bash bool) (verdictKind, string) {
	idx := -1
	for i, a := range args {
		if a == w {
			idx = i
		}
	}
	// command and builtin run the builtin named after them.
	i := 0
	for i < len(args) {
		switch args[i].Lit() {
		case "builtin":
			i++
			continue
		case "command":
			i++
			for i < len(args) && strings.HasPrefix(args[i].Lit(), "-") {
				i++
			}
			continue
		}
		break
	}
	if idx <= i || i >= len(args) {
		return 0, ""
	}
	name := args[i].Lit()
	prev := args[idx-1].Lit()
	switch name {
	case "eval", "trap", "alias":
		return vEval, name
	case "let":
		return vArith, "let"
	case "unset", "read", "mapfile", "readarray":
		return vName, name
	case "declare", "typeset", "local", "export", "readonly", "nameref":
		// Bash parses these as declarations (DeclClause) unless run through
		// command or builtin, and then reads each argument again when the
		// builtin runs. POSIX shells take NAME=value as it is.
		if bash || !pr.afterEquals(w, pos) {
			return vName, name
		}
		if name == "export" || name == "readonly" {
			return 0, ""
		}
		for _, a := range args[i+1 : idx] {
			lit := a.Lit()
			switch {
			case name == "nameref" || strings.HasPrefix(lit, "-") && strings.ContainsRune(lit, 'n'):
				return vName, name + " -n"
			case strings.HasPrefix(lit, "-") && strings.ContainsRune(lit, 'i'):
				return vArith, name + " -i"
			}
		}
	case "printf":
		if prev == "-v" || strings.HasPrefix(args[idx].Lit(), "-v") {
			return vName, "printf -v"
		}
	case "getopts":
		if idx == i+2 {
			return vName, "getopts"
		}
	case "wait":
		if prev == "-p" {
			return vName, "wait -p"
		}
	case "test", "[":
		if prev == "-v" || prev == "-R" {
			return vName, name + " " + prev
		}
	}
	return 0, ""
}

// taint refuses the references assigned to a variable that the script then
// uses where bash evaluates it: n=${item.n}; echo $((n + 1)). A variable is
// tainted when a plain assignment (or a for loop) gives it a reference's
// value, or a tainted variable's, directly; a value that went through a
// command substitution is the command's output, not the reference's.
func (pr *probe) taint(f *syntax.File, ds []decision) {
	type assign struct {
		name  string
		words []*syntax.Word
	}
	var assigns []assign
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Assign:
			if n.Name == nil {
				return true
			}
			a := assign{name: n.Name.Value}
			if n.Value != nil {
				a.words = append(a.words, n.Value)
			}
			if n.Array != nil {
				for _, e := range n.Array.Elems {
					if e.Value != nil {
						a.words = append(a.words, e.Value)
					}
				}
			}
			assigns = append(assigns, a)
		case *syntax.WordIter:
			assigns = append(assigns, assign{name: n.Name.Value, words: n.Items})
		}
		return true
	})
	tainted := map[string]int{} // variable -> the reference it carries
	for changed := true; changed; {
		changed = false
		for _, a := range assigns {
			if _, ok := tainted[a.name]; ok {
				continue
			}
			for _, w := range a.words {
				if ref := pr.carried(w, tainted); ref >= 0 {
					tainted[a.name] = ref
					changed = true
					break
				}
			}
		}
	}
	if len(tainted) == 0 {
		return
	}
	d := declInfo(f)
	walkChains(f, func(stack []syntax.Node) {
		n := stack[len(stack)-1]
		var names []string
		switch n := n.(type) {
		case *syntax.ParamExp:
			if n.Param != nil {
				names = []string{n.Param.Value}
			}
		case *syntax.Lit:
			names = identifiers(n.Value)
		case *syntax.SglQuoted:
			names = identifiers(n.Value)
		}
		for _, name := range names {
			ref, ok := tainted[name]
			if !ok || ds[ref].refusal != nil {
				continue
			}
			j := pr.judge(stack, d, int(n.Pos().Offset()), true)
			if j.eval == nil {
				continue
			}
			if _, isParam := n.(*syntax.ParamExp); !isParam && j.eval.kind != vArith {
				continue // a bare word names a variable only in arithmetic
			}
			line := int(n.Pos().Line())
			ds[ref].refusal = pr.taintError(name, ref, j.eval, line)
		}
	})
}

// walkChains calls fn for every node of f with the chain of nodes from f
// down to it, the node last. fn must not keep the slice.
func walkChains(f *syntax.File, fn func(chain []syntax.Node)) {
	var stack []syntax.Node
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		fn(stack)
		return true
	})
}

func (pr *probe) taintError(name string, ref int, v *verdict, line int) error {
	use := v.err(pr.refs[ref].text).Error()
	switch v.kind {
	case vArith:
		return fmt.Errorf("it is assigned to %s, which is used in %s at line %d: bash evaluates arithmetic recursively and runs any $(...) in a value such as a[$(cmd)], whatever the quoting; "+
			"check that it is a number and assign the checked copy: %s=$(printf '%%s\\n' %s | grep -xE -- '-?[0-9]+') || exit 1", name, v.what, line, name, pr.refs[ref].text)
	default:
		return fmt.Errorf("it is assigned to %s, whose value at line %d %s", name, line, use)
	}
}

// carried returns the reference whose value w carries as is (not through a
// command substitution or arithmetic), or -1.
func (pr *probe) carried(w *syntax.Word, tainted map[string]int) int {
	var parts func([]syntax.WordPart) int
	parts = func(ps []syntax.WordPart) int {
		for _, p := range ps {
			switch p := p.(type) {
			case *syntax.Lit, *syntax.SglQuoted:
				s, e, _ := leafRange(p)
				for i, r := range pr.refs {
					if !r.trusted && r.off >= s && r.end <= e {
						return i
					}
				}
			case *syntax.DblQuoted:
				if ref := parts(p.Parts); ref >= 0 {
					return ref
				}
			case *syntax.ParamExp:
				if p.Param != nil {
					if ref, ok := tainted[p.Param.Value]; ok {
						return ref
					}
				}
				if p.Exp != nil && p.Exp.Word != nil {
					if ref := parts(p.Exp.Word.Parts); ref >= 0 {
						return ref
					}
				}
				if p.Repl != nil && p.Repl.With != nil {
					if ref := parts(p.Repl.With.Parts); ref >= 0 {
						return ref
					}
				}
			}
		}
		return -1
	}
	return parts(w.Parts)
}

// identifiers returns the shell variable names in s, in order.
func identifiers(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			if i == 0 || !isDigit(s[i-1]) {
				out = append(out, s[i:j])
			}
			i = j
			continue
		}
		i++
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// hdocText reports whether the leaf ending chain is text of a here-document
// body itself, not of an expansion within it.
func hdocText(chain []syntax.Node) bool {
	if len(chain) < 3 {
		return false
	}
	r, ok := chain[len(chain)-3].(*syntax.Redirect)
	return ok && r.Hdoc != nil && syntax.Node(r.Hdoc) == chain[len(chain)-2]
}

// hdocQuoted reports whether a here-document's delimiter is quoted (then
// its body is not expanded); ok is false for a delimiter of parts other
// than plain and quoted text.
func hdocQuoted(r *syntax.Redirect) (quoted, ok bool) {
	for _, p := range r.Word.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			quoted = quoted || strings.IndexByte(p.Value, '\\') >= 0
		case *syntax.SglQuoted:
			if p.Dollar {
				return false, false
			}
			quoted = true
		case *syntax.DblQuoted:
			quoted = true
		default:
			return false, false
		}
	}
	return quoted, true
}
