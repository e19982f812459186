package itemrun

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/httpstep"
	"github.com/jetfleet/jetfleet/internal/retry"
)

type typedItem struct {
	Word  string `json:"word"`
	Count int    `json:"count"`
	Inner struct {
		Size float64 `json:"size"`
	} `json:"inner"`
}

type checkedArgs struct {
	Bucket string `json:"bucket"`
}

func (a checkedArgs) Validate() error {
	if a.Bucket == "" {
		return &DecodeError{Field: "bucket", Err: errors.New("required")}
	}
	return nil
}

func TestTypedDecodeErrorsNameTheField(t *testing.T) {
	var got typedItem
	h := Typed(func(_ context.Context, _ *Call, it typedItem) (any, error) { got = it; return "ok", nil })
	tests := []struct {
		name, item string
		wantField  string // "" = success
		wantMsg    string
	}{
		{name: "ok, extra fields ignored", item: `{"word":"jet","count":2,"inner":{"size":1.5},"id":"a"}`},
		{name: "wrong type", item: `{"word":7}`, wantField: "item.word", wantMsg: "want string, got number"},
		{name: "nested wrong type", item: `{"inner":{"size":"big"}}`, wantField: "item.inner.size", wantMsg: "want float64, got string"},
		{name: "not an object", item: `[1]`, wantField: "item", wantMsg: "want itemrun.typedItem, got array"},
		{name: "invalid JSON", item: `{"word":`, wantField: "item"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h(context.Background(), &Call{Item: json.RawMessage(tc.item)})
			if tc.wantField == "" {
				require.NoError(t, err)
				require.Equal(t, "ok", out)
				require.Equal(t, "jet", got.Word)
				require.Equal(t, 1.5, got.Inner.Size)
				return
			}
			require.Error(t, err)
			require.True(t, retry.IsPermanent(err), "a decode error is permanent: %v", err)
			require.ErrorIs(t, err, ErrDecode)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.wantField, de.Field)
			require.Contains(t, de.Error(), tc.wantMsg)
		})
	}
}

func TestTypedWithDecodesArgumentsStrictly(t *testing.T) {
	var got checkedArgs
	h := TypedWith(func(_ context.Context, _ *Call, _ map[string]any, w checkedArgs) (any, error) {
		got = w
		return nil, nil
	})
	tests := []struct {
		name      string
		with      map[string]any
		wantField string
	}{
		{name: "ok", with: map[string]any{"bucket": "photos"}},
		{name: "unknown field", with: map[string]any{"bucket": "photos", "bukcet": "x"}, wantField: "with.bukcet"},
		{name: "wrong type", with: map[string]any{"bucket": 3}, wantField: "with.bucket"},
		{name: "Validate names the field", with: nil, wantField: "with.bucket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h(context.Background(), &Call{Item: json.RawMessage(`{}`), With: tc.with})
			if tc.wantField == "" {
				require.NoError(t, err)
				require.Equal(t, "photos", got.Bucket)
				return
			}
			require.True(t, retry.IsPermanent(err), "%v", err)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.wantField, de.Field, "%v", err)
		})
	}
}

func TestMarkersAreRetrysMarkers(t *testing.T) {
	base := errors.New("x")
	require.True(t, retry.IsPermanent(Permanent(base)))
	d, ok := retry.AfterDelay(After(3e9, base))
	require.True(t, ok)
	require.EqualValues(t, 3e9, d)
	d, ok = retry.SnoozeDelay(Snooze(2e9))
	require.True(t, ok)
	require.EqualValues(t, 2e9, d)
}

func TestMiddlewareOrderAndRecovery(t *testing.T) {
	var trace []string
	mw := func(name string) Middleware {
		return func(next HandlerFunc) HandlerFunc {
			return func(ctx context.Context, c *Call) (any, error) {
				trace = append(trace, name+">")
				v, err := next(ctx, c)
				trace = append(trace, "<"+name)
				return v, err
			}
		}
	}
	a := New(nil, Config{}).Use(mw("outer"), mw("inner"))
	a.Handle("ok", func(context.Context, *Call) (any, error) { trace = append(trace, "handler"); return 1, nil })
	a.Handle("panics", func(context.Context, *Call) (any, error) { panic("boom") })
	a.Use(func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, c *Call) (any, error) {
			if c.ItemID == "mw-panic" {
				panic("middleware boom")
			}
			return next(ctx, c)
		}
	})

	fn, ok := a.handler("ok")
	require.True(t, ok)
	v, err := fn(context.Background(), &Call{})
	require.NoError(t, err)
	require.Equal(t, 1, v)
	require.Equal(t, []string{"outer>", "inner>", "handler", "<inner", "<outer"}, trace)

	// A handler's panic reaches every middleware as an error.
	trace = nil
	fn, _ = a.handler("panics")
	_, err = fn(context.Background(), &Call{})
	require.ErrorIs(t, err, ErrPanic)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.NotEmpty(t, pe.Stack)
	require.Equal(t, []string{"outer>", "inner>", "<inner", "<outer"}, trace)

	// A middleware's panic fails the call, not the caller.
	_, err = fn(context.Background(), &Call{ItemID: "mw-panic"})
	require.ErrorIs(t, err, ErrPanic)
	require.True(t, strings.Contains(err.Error(), "middleware boom"))
}

func TestUseAndHandleAfterRunPanic(t *testing.T) {
	a := New(nil, Config{})
	a.started = true
	require.Panics(t, func() { a.Use(Recover()) })
	require.Panics(t, func() { a.Handle("x", nil) })
}

func TestHandlersAreSorted(t *testing.T) {
	a := New(nil, Config{})
	HandleFunc(a, "b", func(context.Context, *Call, struct{}) (any, error) { return nil, nil })
	HandleWith(a, "a", func(context.Context, *Call, struct{}, struct{}) (any, error) { return nil, nil })
	require.Equal(t, []string{"a", "b", httpstep.Name}, a.Handlers(), "the http handler is built in")
}
