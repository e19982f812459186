package expr

import (
	"fmt"
	"strings"
)

type tokKind int

const (
	tokEOF tokKind = iota
	tokName
	tokString
	tokNumber
	tokOp // == = != < <= > >= && || ! ( ) [ ] , .
)

type token struct {
	kind tokKind
	text string // the name, the string's content, the number or the operator
	pos  int    // byte offset in the source
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of expression"
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

// is reports whether t is the keyword kw (any case) or the operator kw.
func (t token) is(kw string) bool {
	switch t.kind {
	case tokName:
		return strings.EqualFold(t.text, kw)
	case tokOp:
		return t.text == kw
	}
	return false
}

type lexer struct {
	src string
	pos int
}

func (lx *lexer) all() ([]token, error) {
	var toks []token
	for {
		t, err := lx.next()
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		if t.kind == tokEOF {
			return toks, nil
		}
	}
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isNameByte(c byte) bool {
	return isNameStart(c) || c == '-' || c >= '0' && c <= '9'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (lx *lexer) next() (token, error) {
	s := lx.src
	for lx.pos < len(s) && (s[lx.pos] == ' ' || s[lx.pos] == '\t' || s[lx.pos] == '\n' || s[lx.pos] == '\r') {
		lx.pos++
	}
	start := lx.pos
	if start >= len(s) {
		return token{kind: tokEOF, pos: start}, nil
	}
	c := s[start]
	switch {
	case c == '\'' || c == '"':
		end := strings.IndexByte(s[start+1:], c)
		if end < 0 {
			return token{}, &SyntaxError{Src: s, Pos: start, Msg: "string not closed"}
		}
		lx.pos = start + 1 + end + 1
		return token{kind: tokString, text: s[start+1 : start+1+end], pos: start}, nil
	case isDigit(c) || (c == '-' || c == '+') && start+1 < len(s) && (isDigit(s[start+1]) || s[start+1] == '.'),
		c == '.' && start+1 < len(s) && isDigit(s[start+1]):
		i := start + 1
		for i < len(s) && (isDigit(s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
			(s[i] == '-' || s[i] == '+') && (s[i-1] == 'e' || s[i-1] == 'E')) {
			i++
		}
		lx.pos = i
		return token{kind: tokNumber, text: s[start:i], pos: start}, nil
	case isNameStart(c):
		i := start + 1
		for i < len(s) && isNameByte(s[i]) {
			i++
		}
		lx.pos = i
		return token{kind: tokName, text: s[start:i], pos: start}, nil
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "&&", "||", "=", "<", ">", "!", "(", ")", "[", "]", ",", "."} {
		if strings.HasPrefix(s[start:], op) {
			lx.pos = start + len(op)
			return token{kind: tokOp, text: op, pos: start}, nil
		}
	}
	return token{}, &SyntaxError{Src: s, Pos: start, Msg: fmt.Sprintf("unexpected character %q", c)}
}
