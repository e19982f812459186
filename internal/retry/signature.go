package retry

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// Normalisation rules of [Signature], applied in this order.
var signatureRules = []struct {
	re   *regexp.Regexp
	repl string
}{
	// URLs.
	{regexp.MustCompile(`\b[a-z][a-z0-9+.-]*://[^\s"'<>]+`), "<url>"},
	// UUIDs.
	{regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	// Quoted strings: "…" (with escapes), `…`, and '…' when the opening
	// quote does not follow a letter (so "can't" is left alone).
	{regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"|` + "`[^`\\n]*`"), "<q>"},
	{regexp.MustCompile(`(^|[^\pL\pN])'[^'\n]*'`), "${1}<q>"},
	// IPv6 in brackets and IPv4, with an optional port.
	{regexp.MustCompile(`\[[0-9a-f:.%a-z]*:[0-9a-f:.%a-z]*\](?::\d+)?`), "<ip>"},
	{regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b`), "<ip>"},
	// File paths: absolute, ~/ or ./ ../ relative, or Windows drive paths,
	// starting at the beginning or after a space, '=', ':', '(' or '['.
	{regexp.MustCompile(`(^|[\s=:(\[,])(?:[a-z]:\\|~/|\.\.?/|/)[^\s:;,"'()\[\]{}<>]*`), "${1}<path>"},
}

var (
	// hexIDRE: 0x-prefixed hex, or runs of 8+ hex digits (ids, hashes).
	hexIDRE  = regexp.MustCompile(`\b(?:0x[0-9a-f]+|[0-9a-f]{8,})\b`)
	numberRE = regexp.MustCompile(`\d+(?:\.\d+)?`)
	spaceRE  = regexp.MustCompile(`\s+`)
)

// Normalize is the error text [Signature] hashes: lower-cased, with URLs,
// UUIDs, quoted strings, IP addresses (and ports), file paths, hex ids
// (0x… or 8+ hex digits) and numbers replaced by placeholders, and
// whitespace collapsed. "open /tmp/a/1.txt: no such file" becomes
// "open <path>: no such file".
func Normalize(message string) string {
	s := strings.ToLower(message)
	for _, r := range signatureRules {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	s = hexIDRE.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "0x") || strings.ContainsAny(m, "0123456789") {
			return "<hex>"
		}
		return m // a word such as "deadbeefcafe" stays
	})
	s = numberRE.ReplaceAllString(s, "<n>")
	return strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
}

// Signature is a stable short hash of an error message — the first 16 hex
// digits of the SHA-256 of [Normalize](message) — so errors that differ
// only in numbers, ids, paths, addresses or quoted values share it: "open
// /tmp/a/1.txt: no such file" and "open /var/b.txt: no such file" do,
// "permission denied" does not.
func Signature(message string) string {
	sum := sha256.Sum256([]byte(Normalize(message)))
	return hex.EncodeToString(sum[:8])
}
