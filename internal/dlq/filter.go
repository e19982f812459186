package dlq

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrBadFilter is wrapped by filter validation errors; the error names the field.
var ErrBadFilter = errors.New("dlq: bad filter")

// FilterError is an invalid filter field.
type FilterError struct {
	Field   string
	Message string
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("dlq: bad filter: %s: %s", e.Field, e.Message)
}

// Unwrap makes errors.Is(err, ErrBadFilter) hold.
func (e *FilterError) Unwrap() error { return ErrBadFilter }

// ValidateFilter checks a filter before it is used: the job id must be a
// subject token, the time range ordered, the limit not negative.
func ValidateFilter(f messages.DLQFilter) error {
	if f.JobID != "" {
		if err := messages.ValidToken(f.JobID); err != nil {
			return &FilterError{Field: "job_id", Message: err.Error()}
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return &FilterError{Field: "until", Message: fmt.Sprintf("%s is not after since %s", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))}
	}
	if f.Limit < 0 {
		return &FilterError{Field: "limit", Message: fmt.Sprintf("%d, want >= 0", f.Limit)}
	}
	return nil
}

// Matcher is a compiled DLQFilter: the one place that decides whether an
// entry is selected, for list, stats, export, purge and replay alike. Its
// methods are safe for concurrent use.
type Matcher struct {
	f    messages.DLQFilter
	sig  string
	text string
	// rawText: text can be searched in an entry's raw JSON (plainJSON).
	rawText bool
}

// NewMatcher compiles f (which should have passed ValidateFilter).
func NewMatcher(f messages.DLQFilter) *Matcher {
	m := &Matcher{f: f, sig: strings.ToLower(f.Signature), text: strings.ToLower(f.Text)}
	m.rawText = plainJSON(m.text)
	return m
}

// plainJSON reports whether s is written the same inside a JSON string as
// it is: no quote, backslash, control character, '<', '>' or '&' (Go's
// encoder escapes those three), U+2028, U+2029, U+FFFD (what invalid
// UTF-8 becomes) or invalid UTF-8.
func plainJSON(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == '"' || r == '\\' || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029 || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// entryMark is how every entry jetfleet writes begins, after its schema
// version ({"v":1,) and before v0.4.0 at once: its job id.
var entryMark = []byte(`"job_id":"`)

// entryBody returns body from its job id member on when it starts as
// jetfleet's entries do: {"job_id":" or {"v":<digits>,"job_id":".
func entryBody(body []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(body, []byte(`{`))
	if !ok {
		return nil, false
	}
	if v, ok := bytes.CutPrefix(rest, []byte(`"v":`)); ok {
		i := 0
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		if i == 0 || i == len(v) || v[i] != ',' {
			return nil, false
		}
		rest = v[i+1:]
	}
	return rest, bytes.HasPrefix(rest, entryMark)
}

// rejectRaw reports, from a DLQ message's raw body, that the entry cannot
// match the text filter, so that a scan skips decoding it (decoding costs
// about eight times a case-folded search of the bytes). Every field the
// text filter searches (error, item id, payload, attempt messages) is in
// the body, and a plain text is written there as it is, so a body without
// the text cannot match. It decides only for bodies that start as
// jetfleet's entries do: anything else is decoded (it may list as
// undecodable, with a synthesised error the text could match).
func (m *Matcher) rejectRaw(body []byte) bool {
	if !m.rawText {
		return false
	}
	rest, ok := entryBody(body)
	if !ok || len(rest) == len(entryMark) || rest[len(entryMark)] == '"' {
		return false
	}
	return !bytes.Contains(bytes.ToLower(body), []byte(m.text))
}

// Filter is the filter the matcher was built from.
func (m *Matcher) Filter() messages.DLQFilter { return m.f }

// Match reports whether e is selected. Limit and AfterSeq are applied by the
// scan, not here.
func (m *Matcher) Match(e *messages.DLQEntry) bool {
	f := &m.f
	if f.JobID != "" && e.JobID != f.JobID {
		return false
	}
	if f.Reason != "" && e.Reason != f.Reason {
		return false
	}
	if f.ErrorClass != "" && !strings.EqualFold(e.ErrorClass, f.ErrorClass) {
		return false
	}
	if m.sig != "" && !strings.HasPrefix(strings.ToLower(e.Signature), m.sig) {
		return false
	}
	if !f.Since.IsZero() && e.DeadLetteredAt.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !e.DeadLetteredAt.Before(f.Until) {
		return false
	}
	if m.text != "" && !m.matchText(e) {
		return false
	}
	return true
}

// matchText searches the error, item id, payload and attempt messages.
func (m *Matcher) matchText(e *messages.DLQEntry) bool {
	if containsFold(e.Error, m.text) || containsFold(e.ItemID, m.text) {
		return true
	}
	if bytes.Contains(bytes.ToLower(e.Payload), []byte(m.text)) {
		return true
	}
	for i := range e.Attempts {
		if containsFold(e.Attempts[i].Message, m.text) {
			return true
		}
	}
	return false
}

// containsFold reports whether lowerNeedle (already lower case) occurs in s,
// ignoring case.
func containsFold(s, lowerNeedle string) bool {
	return strings.Contains(strings.ToLower(s), lowerNeedle)
}

// ParseTime reads a filter's since or until as people write it: RFC 3339
// (2026-03-01T12:00:00Z), a date (2026-03-01, local time), or a duration
// ago (90m, 2d). "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02", s, time.Local); err == nil {
		return t, nil
	}
	d, err := messages.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-03-01T12:00:00Z), a date (2026-03-01) nor a duration ago (90m, 2d)", s)
	}
	return now.Add(-d.D()), nil
}
