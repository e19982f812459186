package messages

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalidSpec is wrapped by every *ValidationError.
var ErrInvalidSpec = errors.New("messages: invalid job spec")

// FieldError is one problem with one field. Field is a path such as
// "agent_template[1].retry_config.retry_on[2].pattern" ("" = the document).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
	// Line is the 1-based line of the field in the source document, when
	// known (0 = unknown).
	Line int `json:"line,omitempty"`
}

// Error formats the problem as "field: message", or
// "field (line N): message" when the line is known.
func (e FieldError) Error() string {
	where := e.Field
	if e.Line > 0 {
		if where == "" {
			where = "line " + strconv.Itoa(e.Line)
		} else {
			where += " (line " + strconv.Itoa(e.Line) + ")"
		}
	}
	if where == "" {
		return e.Message
	}
	return where + ": " + e.Message
}

// JoinPath appends a field name to a field path ("" is the document).
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// IndexPath appends an array index to a field path.
func IndexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// KindRetryConfig is the ValidationError.Kind of a standalone retry config.
const KindRetryConfig = "retry config"

// ValidationError lists every problem found in a document.
type ValidationError struct {
	// Kind names what was validated: "job spec" when empty, or KindRetryConfig.
	Kind     string
	Problems []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	kind := e.Kind
	if kind == "" {
		kind = "job spec"
	}
	b.WriteString("invalid " + kind + ": ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidSpec) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidSpec }

// Add records a problem.
func (e *ValidationError) Add(field, msg string) {
	e.Problems = append(e.Problems, FieldError{Field: field, Message: msg})
}

// Err returns e, or nil when it holds no problem.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Problems) == 0 {
		return nil
	}
	return e
}
