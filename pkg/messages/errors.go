package messages

import (
	"errors"
	"strings"
)

// ErrInvalidSpec is wrapped by every *ValidationError.
var ErrInvalidSpec = errors.New("messages: invalid job spec")

// FieldError is one problem with one field. Field is a path such as
// "agent_template[1].retry_config.retry_on[2].pattern" ("" = the document).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// ValidationError lists every problem found in a document.
type ValidationError struct {
	Problems []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid job spec: ")
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
