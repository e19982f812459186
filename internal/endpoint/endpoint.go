// Package endpoint holds what the coordinator's API services share: the
// signature of an endpoint of the jetfleet micro service, the strict
// decoding of its request and its error replies. It owns no endpoint and
// no subject: internal/api serves them.
package endpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Func answers one request of an endpoint: a reply to encode, or an error
// reply. It is called concurrently, for every request.
type Func func(ctx context.Context, data []byte) (any, *messages.APIError)

// Err is an error reply with code and message.
func Err(code, msg string) *messages.APIError { return &messages.APIError{Code: code, Message: msg} }

// Decode decodes a JSON request into v strictly (no unknown field); an
// empty body is allowed, for a request with no required field.
func Decode(data []byte, v any) *messages.APIError {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Err(messages.CodeBadRequest, "request is not valid JSON: "+err.Error())
	}
	return nil
}

// Problems is the bad_request reply of a request with problems (at least
// one): the first names the field, all are listed.
func Problems(problems []messages.FieldError) *messages.APIError {
	e := &messages.APIError{Code: messages.CodeBadRequest, Field: problems[0].Field,
		Message: problems[0].Error(), Problems: problems}
	if len(problems) > 1 {
		e.Message += fmt.Sprintf(" (and %d more)", len(problems)-1)
	}
	return e
}
