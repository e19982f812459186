package main

import (
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
)

// newTable returns a writer for a table on w: cells end with a tab, and each
// column is as wide as its widest cell plus two spaces, so a long job id,
// item id or signature pushes the columns after it along instead of
// breaking them. The text after a line's last tab is not a column (an error
// message, a bar). Call Flush after the last row.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// cell makes s, which may be user data (an item id is any bytes), safe in a
// table: invalid UTF-8 becomes U+FFFD, and tabs, newlines and other control
// characters (ESC, BEL, C1) become spaces, so no value can start a cell or a
// line or drive the terminal. Format characters (category Cf: bidi
// overrides and isolates such as U+202E, zero-width characters, the BOM)
// and the line and paragraph separators become U+FFFD, visibly: they would
// reorder or hide what a line shows.
func cell(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.IsControl(r):
			return ' '
		case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			return '\uFFFD'
		}
		return r
	}, s)
}
