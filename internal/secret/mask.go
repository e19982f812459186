// Package secret reads a job's secrets on the agent (from the agent's
// environment, or a file under a directory it may read) and masks their
// values in whatever a step's output becomes (docs/job-spec.md,
// "Secrets"). Nothing of it runs on the coordinator: a secret's value is
// never in a message.
package secret

import (
	"slices"
	"strings"
)

// Mask replaces a secret's value.
const Mask = "***"

// Masker replaces the values it was given by Mask. It is safe for
// concurrent use (it is never changed after NewMasker). A nil *Masker
// masks nothing.
type Masker struct {
	values []string // longest first, so that a value inside another is not half masked
}

// NewMasker returns a masker of the non-empty values, or nil when there
// are none.
func NewMasker(values ...string) *Masker {
	var vs []string
	for _, v := range values {
		if v != "" && !slices.Contains(vs, v) {
			vs = append(vs, v)
			// A value printed with its trailing newline trimmed, or
			// quoted, still holds the trimmed value.
			if t := strings.TrimSpace(v); t != "" && t != v && !slices.Contains(vs, t) {
				vs = append(vs, t)
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	slices.SortStableFunc(vs, func(a, b string) int { return len(b) - len(a) })
	return &Masker{values: vs}
}

// Mask returns s with every occurrence of a value replaced by Mask.
func (m *Masker) Mask(s string) string {
	if m == nil || s == "" {
		return s
	}
	for _, v := range m.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return s
}

// MaskTail is Mask for the kept tail of a longer text (cut: its start
// was dropped): a start of s that is the end of a value, the rest of a
// value cut in two, is masked too.
func (m *Masker) MaskTail(s string, cut bool) string {
	s = m.Mask(s)
	if m == nil || !cut {
		return s
	}
	for _, v := range m.values {
		for n := min(len(v)-1, len(s)); n > 0; n-- {
			if strings.HasPrefix(s, v[len(v)-n:]) {
				return Mask + s[n:]
			}
		}
	}
	return s
}

// Len is the number of values masked.
func (m *Masker) Len() int {
	if m == nil {
		return 0
	}
	return len(m.values)
}
