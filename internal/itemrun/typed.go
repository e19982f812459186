package itemrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/retry"
)

// ErrDecode is matched (errors.Is) by every [DecodeError].
var ErrDecode = errors.New("agent: cannot decode")

// DecodeError says which field of an item or of a step's with: arguments
// did not decode into the handler's type. A typed handler's decode error is
// permanent: the same payload fails the same way on every attempt, so the
// step gives up at once ([IsPermanent] reports true for it).
type DecodeError struct {
	// Field is the path of the field: "item.word", "with.bucket", or
	// "item" / "with" when the payload as a whole is at fault.
	Field string
	// Err says what is wrong with it.
	Err error
}

func (e *DecodeError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is matches ErrDecode.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// Validator is implemented by an item or with: type that checks itself
// after decoding; a non-nil error fails the step permanently (wrap the
// error in a [DecodeError] to name the field).
type Validator interface {
	Validate() error
}

// Typed turns a handler of items of type T into a [HandlerFunc] (River's
// Worker[T]): each item's JSON payload is decoded into a T first. Unknown
// fields of the item are ignored (an item usually carries more than one
// step reads); a field of the wrong type, invalid JSON, or a T whose
// Validate method fails makes the step fail permanently with a
// [DecodeError] naming the field ("item.word: want string, got number").
// Use it where a map of handlers is wanted (fleettest.RunFleet); on an
// agent, [HandleFunc] registers one.
func Typed[T any](fn func(ctx context.Context, c *Call, item T) (any, error)) HandlerFunc {
	return func(ctx context.Context, c *Call) (any, error) {
		var item T
		if err := decodeItem(c.Item, &item); err != nil {
			return nil, retry.Permanent(err)
		}
		return fn(ctx, c, item)
	}
}

// TypedWith is [Typed] with typed step arguments: the step's with: map is
// decoded into a W too. Unlike the item, a with: field that W does not
// declare is an error ("with.bukcet: unknown field"): the arguments are
// written for this handler, so an unknown one is a typo.
func TypedWith[T, W any](fn func(ctx context.Context, c *Call, item T, with W) (any, error)) HandlerFunc {
	return func(ctx context.Context, c *Call) (any, error) {
		var item T
		if err := decodeItem(c.Item, &item); err != nil {
			return nil, retry.Permanent(err)
		}
		var with W
		if err := c.DecodeWith(&with); err != nil {
			return nil, retry.Permanent(err)
		}
		return fn(ctx, c, item, with)
	}
}

// HandleFunc registers fn, a handler of items of type T (see [Typed]), as
// the handler named name on a. It returns a for chaining and panics if
// called after Run started, like [Agent.Handle].
func HandleFunc[T any](a *Agent, name string, fn func(ctx context.Context, c *Call, item T) (any, error)) *Agent {
	return a.Handle(name, Typed(fn))
}

// HandleWith registers fn, a handler of items of type T with step
// arguments of type W (see [TypedWith]), as the handler named name on a.
func HandleWith[T, W any](a *Agent, name string, fn func(ctx context.Context, c *Call, item T, with W) (any, error)) *Agent {
	return a.Handle(name, TypedWith(fn))
}

// DecodeWith decodes the step's with: arguments into v (a pointer to a
// struct or map). An argument v has no field for, or one of the wrong
// type, is a *[DecodeError] naming it; so is an error of v's Validate
// method, if it has one. An untyped handler can call it; [HandleWith] does.
func (c *Call) DecodeWith(v any) error {
	raw := []byte("{}")
	if c.With != nil {
		var err error
		if raw, err = json.Marshal(c.With); err != nil {
			return &DecodeError{Field: "with", Err: err}
		}
	}
	return decodeJSON("with", raw, v, true)
}

func decodeItem(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	return decodeJSON("item", raw, v, false)
}

// decodeJSON decodes raw into v, turning encoding/json's errors into a
// DecodeError with the field's path under root.
func decodeJSON(root string, raw []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return decodeError(root, err)
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			var de *DecodeError
			if errors.As(err, &de) {
				return &DecodeError{Field: root + "." + de.Field, Err: de.Err}
			}
			return &DecodeError{Field: root, Err: err}
		}
	}
	return nil
}

func decodeError(root string, err error) *DecodeError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := root
		if te.Field != "" {
			field += "." + te.Field
		}
		return &DecodeError{Field: field, Err: fmt.Errorf("want %s, got %s", te.Type, te.Value)}
	case errors.As(err, &se):
		return &DecodeError{Field: root, Err: fmt.Errorf("invalid JSON at offset %d: %w", se.Offset, err)}
	}
	// DisallowUnknownFields: `json: unknown field "name"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &DecodeError{Field: root + "." + strings.Trim(name, `"`), Err: errors.New("unknown field")}
	}
	return &DecodeError{Field: root, Err: err}
}
