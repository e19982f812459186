package shell

import (
	"errors"
	"strings"
)

// The lexer follows the shell's quoting state through the literal parts of
// a template, so that each reference is encoded for the place it stands in:
// a bare word gets [Quote], a position inside "..." or '...' gets the escape
// that keeps the value literal there, and places where no encoding is safe
// (`...`, here-documents, ${...}, $((...)), after a backslash, after
// bash's $'...', after a case statement inside $(...)) are refused. It knows POSIX sh as dash and bash read it;
// where the two differ it refuses rather than guesses.

// ctxKind is a shell context that changes how characters are read.
type ctxKind uint8

const (
	kCmd       ctxKind = iota // command level: the script itself, or inside $(...)
	kSingle                   // '...'
	kDouble                   // "..."
	kBackquote                // `...`
	kComment                  // # to the end of the line
	kParam                    // ${...}
	kArith                    // $((...))
	kHeredoc                  // here-document bodies
)

type frame struct {
	kind ctxKind
	// sub marks a kCmd opened by $( and closed by the matching ).
	sub bool
	// depth counts open parentheses inside a sub kCmd or a kArith.
	depth int
	// wordStart (kCmd) is true when the next character begins a word, where
	// a # starts a comment.
	wordStart bool
}

type heredoc struct {
	delim     string
	stripTabs bool // <<-
}

// hereWord reads the delimiter word after << or <<-.
type hereWord struct {
	stripTabs bool
	started   bool
	quote     byte // ' or " while inside quotes in the word
	esc       bool
	buf       strings.Builder
}

// encoding is how a value is written at a reference's position.
type encoding uint8

const (
	encWord    encoding = iota // a bare word: Quote
	encSingle                  // inside '...'
	encDouble                  // inside "..."
	encLiteral                 // inside a comment: the reference as written
)

type lexer struct {
	stack   []frame
	escaped bool // the previous character was a backslash (kCmd, kDouble, ...)
	// escWordStart is the wordStart before the backslash, restored by a
	// line continuation.
	escWordStart bool
	hw           *hereWord
	pending      []heredoc // bodies that start at the next newline
	line         strings.Builder
	// poison, once set, refuses every later reference.
	poison string
}

func newLexer() *lexer {
	return &lexer{stack: []frame{{kind: kCmd, wordStart: true}}}
}

func (l *lexer) top() *frame { return &l.stack[len(l.stack)-1] }

func (l *lexer) push(f frame) { l.stack = append(l.stack, f) }

// pop leaves the current context; the construct it closed was part of a
// word in the enclosing command context.
func (l *lexer) pop() {
	if len(l.stack) > 1 {
		l.stack = l.stack[:len(l.stack)-1]
	}
	if t := l.top(); t.kind == kCmd {
		t.wordStart = false
	}
}

// feed advances the state over literal script text.
func (l *lexer) feed(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if l.hw != nil {
			if l.feedHereWord(c) {
				continue
			}
		}
		f := l.top()
		switch f.kind {
		case kCmd:
			i += l.cmdChar(s, i)
		case kSingle:
			if c == '\'' {
				l.pop()
			}
		case kDouble:
			if l.escaped {
				l.escaped = false
				continue
			}
			switch c {
			case '\\':
				l.escaped = true
			case '"':
				l.pop()
			case '`':
				l.push(frame{kind: kBackquote})
			case '$':
				i += l.dollar(s, i, false)
			}
		case kBackquote:
			// Ends at the first backquote not escaped by a backslash,
			// whatever quotes stand between.
			if l.escaped {
				l.escaped = false
				continue
			}
			switch c {
			case '\\':
				l.escaped = true
			case '`':
				l.pop()
			}
		case kComment:
			if c == '\n' {
				l.stack = l.stack[:len(l.stack)-1]
				i-- // the newline ends the command line too
			}
		case kParam, kArith:
			if l.escaped {
				l.escaped = false
				continue
			}
			switch c {
			case '\\':
				l.escaped = true
			case '\'':
				l.push(frame{kind: kSingle})
			case '"':
				l.push(frame{kind: kDouble})
			case '`':
				l.push(frame{kind: kBackquote})
			case '$':
				i += l.dollar(s, i, true)
			case '}':
				if f.kind == kParam {
					l.pop()
				}
			case '(':
				if f.kind == kArith {
					f.depth++
				}
			case ')':
				if f.kind == kArith {
					if f.depth > 0 {
						f.depth--
					} else if i+1 < len(s) && s[i+1] == ')' {
						i++
						l.pop()
					}
				}
			}
		case kHeredoc:
			if c != '\n' {
				l.line.WriteByte(c)
				continue
			}
			line := l.line.String()
			l.line.Reset()
			h := l.pending[0]
			if h.stripTabs {
				line = strings.TrimLeft(line, "\t")
			}
			if line == h.delim {
				l.pending = l.pending[1:]
				if len(l.pending) == 0 {
					l.stack = l.stack[:len(l.stack)-1]
					l.top().wordStart = true
				}
			}
		}
	}
}

// cmdChar reads s[i] at command level and returns how many extra
// characters it consumed.
func (l *lexer) cmdChar(s string, i int) int {
	f := l.top()
	c := s[i]
	if l.escaped {
		l.escaped = false
		if c == '\n' {
			f.wordStart = l.escWordStart // line continuation
		} else {
			f.wordStart = false
		}
		return 0
	}
	switch c {
	case '\\':
		l.escaped = true
		l.escWordStart = f.wordStart
	case '\'':
		f.wordStart = false
		l.push(frame{kind: kSingle})
	case '"':
		f.wordStart = false
		l.push(frame{kind: kDouble})
	case '`':
		f.wordStart = false
		l.push(frame{kind: kBackquote})
	case '$':
		f.wordStart = false
		return l.dollar(s, i, true)
	case '#':
		if f.wordStart {
			l.push(frame{kind: kComment})
		}
	case '(':
		f.wordStart = true
		if f.sub {
			f.depth++
		}
	case ')':
		f.wordStart = true
		if f.sub {
			if f.depth == 0 {
				l.pop()
			} else {
				f.depth--
			}
		}
	case '<':
		f.wordStart = true
		if i+1 < len(s) && s[i+1] == '<' {
			if i+2 < len(s) && s[i+2] == '<' {
				return 2 // bash here-string <<<: an ordinary word follows
			}
			strip := i+2 < len(s) && s[i+2] == '-'
			l.hw = &hereWord{stripTabs: strip}
			if strip {
				return 2
			}
			return 1
		}
	case '\n':
		f.wordStart = true
		if len(l.pending) > 0 {
			l.push(frame{kind: kHeredoc})
		}
	case ' ', '\t', ';', '&', '|', '>':
		f.wordStart = true
	default:
		// A case pattern's unbalanced ")" would end $(...) for a reader
		// that counts parentheses, as this one does.
		if f.sub && f.wordStart && l.poison == "" && strings.HasPrefix(s[i:], "case") &&
			i+4 < len(s) && strings.IndexByte(" \t\n", s[i+4]) >= 0 {
			l.poison = "after a case statement inside $(...)"
		}
		f.wordStart = false
	}
	return 0
}

// dollar reads a $ at s[i]: $( $(( ${ open contexts; $' (bash ANSI-C
// quoting, which dash reads as $ then '...') poisons the lexer where it is
// special. It returns how many extra characters it consumed.
func (l *lexer) dollar(s string, i int, ansiSpecial bool) int {
	if i+1 >= len(s) {
		return 0
	}
	switch s[i+1] {
	case '(':
		if i+2 < len(s) && s[i+2] == '(' {
			l.push(frame{kind: kArith})
			return 2
		}
		l.push(frame{kind: kCmd, sub: true, wordStart: true})
		return 1
	case '{':
		l.push(frame{kind: kParam})
		return 1
	case '\'':
		if ansiSpecial && l.poison == "" {
			l.poison = "after $'...' quoting, which bash and dash read differently"
		}
	}
	return 0
}

// feedHereWord reads one character of a here-document delimiter. It
// returns false when c ends the word and must be read as usual.
func (l *lexer) feedHereWord(c byte) bool {
	hw := l.hw
	switch {
	case hw.esc:
		hw.esc = false
		hw.buf.WriteByte(c)
		return true
	case hw.quote != 0:
		if c == hw.quote {
			hw.quote = 0
		} else {
			hw.buf.WriteByte(c)
		}
		return true
	case c == '\\':
		hw.esc, hw.started = true, true
		return true
	case c == '\'' || c == '"':
		hw.quote, hw.started = c, true
		return true
	case c == ' ' || c == '\t':
		if !hw.started {
			return true
		}
	case strings.IndexByte(";&|()<>\n", c) >= 0:
	default:
		hw.buf.WriteByte(c)
		hw.started = true
		return true
	}
	l.pending = append(l.pending, heredoc{delim: hw.buf.String(), stripTabs: hw.stripTabs})
	l.hw = nil
	return false
}

// ref reports how a value must be encoded at the current position, or why
// none is safe. It advances the state past the value.
func (l *lexer) ref() (encoding, error) {
	if l.poison != "" {
		return 0, errors.New(l.poison)
	}
	if l.hw != nil {
		return 0, errors.New("in a here-document delimiter")
	}
	if l.escaped {
		return 0, errors.New("after a backslash")
	}
	for _, f := range l.stack {
		if f.kind == kBackquote {
			return 0, errors.New("inside `...` command substitution; use $(...) instead")
		}
	}
	f := l.top()
	var parent ctxKind = kCmd
	if len(l.stack) > 1 {
		parent = l.stack[len(l.stack)-2].kind
	}
	switch f.kind {
	case kCmd:
		f.wordStart = false
		return encWord, nil
	case kSingle, kDouble:
		if parent == kParam || parent == kArith {
			return 0, errors.New("inside quotes within ${...} or $((...)); assign the value to a variable first")
		}
		if f.kind == kSingle {
			return encSingle, nil
		}
		return encDouble, nil
	case kComment:
		return encLiteral, nil
	case kParam:
		return 0, errors.New("inside ${...} parameter expansion; assign the value to a variable first")
	case kArith:
		return 0, errors.New("inside $((...)) arithmetic; assign the value to a variable first, as in n=${item.n}; echo $((n + 1))")
	default: // kHeredoc
		return 0, errors.New("inside a here-document; use a variable or $ITEM_JSON")
	}
}
