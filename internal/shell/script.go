package shell

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// Script is a template whose references have been placed: each one stands
// where its value can be written as a literal, and Script knows how. Build
// one with [Compile] once per template, then [Script.Expand] it for every
// item. A Script is immutable and safe for concurrent use.
type Script struct {
	parts []scriptPart
	raw   string
}

type scriptPart struct {
	lit  string
	ref  []string // nil for a literal
	part wire.TemplatePart
	enc  encoding
}

// encoding is how a value is written at a reference's position.
type encoding uint8

const (
	encWord    encoding = iota // a bare word: Quote
	encSingle                  // inside '...'
	encDouble                  // inside "..."
	encLiteral                 // inside a comment: the reference as written
	encBare                    // a number the agent made (${attempt}, ${map.total}) in arithmetic: as is
	encHdoc                    // the text of an unquoted here-document: a variable's expansion
)

// HdocVarPrefix names the variables that carry the values of references in
// here-documents: ${item.x} in the text of "cat <<EOF" is written as
// ${JETFLEET_HD0} and the value handed over in JETFLEET_HD0 (see
// [Script.ExpandEnv]). The shell expands a variable there without reading
// its value as shell text: quotes, $(...), backquotes and a line holding
// the delimiter stay text.
const HdocVarPrefix = "JETFLEET_HD"

// Compile finds where each reference of t stands in the shell script, with
// a real shell parser (mvdan.cc/sh) reading it both as bash and as POSIX sh,
// and decides how its value is written there. It refuses, with one
// *RefError (ErrUnsafePosition) per reference, every position where no
// quoting keeps a value literal:
//
//   - arithmetic, which bash evaluates recursively, running any $(...) in a
//     value such as a[$(cmd)] whatever the quoting: $((...)), ((...)), let,
//     for ((...)), array subscripts, ${v:offset:length}, the operands of
//     [[ ... -eq/-ne/-lt/-le/-gt/-ge ... ]], values given to a variable
//     declared with declare/typeset/local -i or -n;
//   - a variable assigned from a reference (directly, or through other plain
//     assignments) and then used in any of those places — the assignment is
//     refused;
//   - variable names, where bash evaluates a subscript: the name of an
//     assignment, for-loop or function, the names given to declare, typeset,
//     local, export, readonly, unset, read, mapfile, readarray, printf -v,
//     getopts, wait -p, [[ -v ]] and test -v;
//   - the arguments of eval, trap and alias, which run them as commands,
//     and values given to PS0-PS4, PROMPT_COMMAND, BASH_ENV and ENV;
//   - inside `...`, a quoted here-document (<<'EOF'), an expansion within
//     a here-document, a here-document's delimiter, ${...}, bash's $'...'
//     or $"...", an extended glob, and right after a backslash;
//   - anywhere bash and POSIX sh read the script differently.
//
// In the text of an unquoted here-document (cat <<EOF) a reference is
// written as a variable's expansion, ${JETFLEET_HD0}, whose value
// [Script.ExpandEnv] returns: the shell expands it there without reading
// the value again.
//
// ${attempt} and ${map.successful|failed|total} are numbers the agent
// makes, not data: they are allowed in arithmetic and inside ${...}.
//
// A template with references that does not parse as a shell script is an
// ErrSyntax error: where its references stand cannot be known.
func Compile(t wire.Template) (*Script, error) {
	s := &Script{raw: t.Raw}
	nrefs := 0
	for _, p := range t.Parts {
		if p.Ref != nil {
			nrefs++
		}
	}
	if nrefs == 0 {
		for _, p := range t.Parts {
			s.parts = append(s.parts, scriptPart{lit: p.Literal})
		}
		return s, nil
	}
	pr := newProbe(t)
	decisions, err := pr.analyse()
	if err != nil {
		return nil, err
	}
	var errs []error
	i := 0
	for _, p := range t.Parts {
		if p.Ref == nil {
			s.parts = append(s.parts, scriptPart{lit: p.Literal})
			continue
		}
		d := decisions[i]
		i++
		if d.refusal != nil {
			line := 0
			if strings.Contains(t.Raw, "\n") {
				line = d.line
			}
			errs = append(errs, &RefError{Ref: refText(p.Ref), Line: line, Kind: ErrUnsafePosition, Err: fmt.Errorf("cannot be quoted safely: %w", d.refusal)})
			continue
		}
		s.parts = append(s.parts, scriptPart{ref: p.Ref, part: p, enc: d.enc})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Expand writes the script with the values of v: see [Expand]. The values
// of references in here-documents are assigned at the top of the script
// (JETFLEET_HD0='...'); [Script.ExpandEnv] hands them over in the
// environment instead, leaving the script's lines where they were.
func (s *Script) Expand(v Vars) (string, error) {
	script, env, err := s.ExpandEnv(v)
	if err != nil || len(env) == 0 {
		return script, err
	}
	var b strings.Builder
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		b.WriteString(name + "=" + Quote(val) + "\n")
	}
	return b.String() + script, nil
}

// ExpandEnv writes the script with the values of v, as [Script.Expand]
// does, but returns the values of the references in here-documents as
// NAME=value entries for the step's environment (names starting with
// [HdocVarPrefix]), which the script reads.
func (s *Script) ExpandEnv(v Vars) (script string, env []string, err error) {
	var b strings.Builder
	b.Grow(len(s.raw) + 32)
	var errs []error
	for _, p := range s.parts {
		if p.ref == nil {
			b.WriteString(p.lit)
			continue
		}
		ref := p.part.Text()
		if p.enc == encLiteral {
			// A newline inside the braces would end the comment.
			b.WriteString(strings.ReplaceAll(ref, "\n", " "))
			continue
		}
		val, err := p.part.Apply(v.resolve(p.ref))
		if err != nil {
			errs = append(errs, &RefError{Ref: ref, Kind: kindOf(err), Err: err})
			continue
		}
		if strings.IndexByte(val, 0) >= 0 {
			errs = append(errs, &RefError{Ref: ref, Kind: ErrNUL, Err: errors.New("value contains a NUL byte")})
			continue
		}
		switch p.enc {
		case encWord:
			b.WriteString(Quote(val))
		case encSingle:
			b.WriteString(quoteInSingle(val))
		case encDouble:
			b.WriteString(quoteInDouble(val))
		case encHdoc:
			name := HdocVarPrefix + strconv.Itoa(len(env))
			env = append(env, name+"="+val)
			b.WriteString("${" + name + "}")
		case encBare:
			if _, err := strconv.Atoi(val); err != nil { // never: only agent-made numbers are bare
				errs = append(errs, &RefError{Ref: ref, Kind: ErrUnknownRef, Err: fmt.Errorf("%q is not a number", val)})
				continue
			}
			b.WriteString(val)
		}
	}
	if len(errs) > 0 {
		return "", nil, errors.Join(errs...)
	}
	return b.String(), env, nil
}

// trustedNumber reports whether ref is a number the agent makes itself, never
// data from the item or the environment.
func trustedNumber(ref []string) bool {
	switch ref[0] {
	case wire.RefAttempt:
		return true
	case wire.RefItemTotal:
		return true
	case wire.RefMap:
		return len(ref) == 2 && (ref[1] == "successful" || ref[1] == "failed" || ref[1] == "total")
	}
	return false
}
