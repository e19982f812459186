package shell

import "strings"

// Quote returns s as one literal POSIX shell word, in single quotes; each
// embedded single quote closes the quotes, is escaped, and reopens them:
//
//	Quote("it's")           == `'it'\''s'`
//	Quote("")               == `''`
//	Quote("$(id); rm -rf /") == `'$(id); rm -rf /'`
//
// Nothing inside the result is special to the shell: not $, `, \, ", globs,
// spaces or newlines.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// quoteInSingle encodes s for a position already inside '...': embedded
// single quotes close the quotes, add an escaped quote and reopen them.
func quoteInSingle(s string) string {
	return strings.ReplaceAll(s, "'", `'\''`)
}

// quoteInDouble encodes s for a position inside "...": the four characters
// a backslash escapes there ($ ` " \) get one. A newline stays as it is
// (a backslash before it would be a line continuation).
func quoteInDouble(s string) string {
	if !strings.ContainsAny(s, "$`\"\\") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '$', '`', '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
