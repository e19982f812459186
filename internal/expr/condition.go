package expr

import "strings"

// ParseCondition parses a step's condition (Prodigy's when:), in which
// variables are written as ${name.path} or bare, name.path: each ${...}
// outside a quoted string is read as the path it holds, so
// "${tests_passed} == false" is tests_passed == false. Inside quotes,
// ${...} is literal text.
func ParseCondition(src string) (*Expr, error) {
	if !strings.Contains(src, "${") {
		return Parse(src)
	}
	var b strings.Builder
	var quote byte
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '$' && strings.HasPrefix(src[i:], "${"):
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, &SyntaxError{Src: src, Msg: "unterminated ${"}
			}
			inner := strings.TrimSpace(src[i+2 : i+end])
			if inner == "" {
				return nil, &SyntaxError{Src: src, Msg: "empty ${}"}
			}
			b.WriteByte(' ')
			b.WriteString(inner)
			b.WriteByte(' ')
			i += end
			continue
		}
		b.WriteByte(c)
	}
	e, err := Parse(b.String())
	if err != nil {
		return nil, err
	}
	e.src = src
	return e, nil
}
