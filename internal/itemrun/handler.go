package itemrun

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// HandlerFunc runs one attempt of a handler step. Its return value (if not
// nil) is the step's output, JSON-encoded unless it is a string or []byte.
// Steer retries with marker errors: [Permanent](err), [After](d, err),
// [Snooze](d). ctx is cancelled at the step's timeout and at shutdown.
// A HandlerFunc must be safe for concurrent use and idempotent.
type HandlerFunc func(ctx context.Context, call *Call) (any, error)

// Call describes one attempt of a handler step.
type Call struct {
	JobID  string
	ItemID string
	Index  int64
	Group  string
	// Step is the 0-based step index, StepName its name.
	Step     int
	StepName string
	// Attempt is the 1-based attempt number of the step.
	Attempt int
	// Item is the item's JSON payload.
	Item json.RawMessage
	// With holds the step's arguments.
	With map[string]any
	// Cause is the item's error when the handler runs as the
	// on_item_failure: custom step; nil otherwise.
	Cause error
	// Map holds the map phase's results when the handler runs as a reduce
	// step; nil otherwise.
	Map *MapResults
}

// MapResults is what a reduce handler sees of the map phase.
type MapResults struct {
	// Path of a local JSON file: an array of messages.MapOutput.
	Path string
	// Successful and Failed count the map phase's items (Failed includes
	// dead-lettered and skipped items); Total is the job's item count.
	Successful, Failed, Total int
}

// Decode unmarshals the item's payload into v.
func (c *Call) Decode(v any) error { return json.Unmarshal(c.Item, v) }

// Arg returns a step argument.
func (c *Call) Arg(name string) (any, bool) {
	v, ok := c.With[name]
	return v, ok
}

// argFloat reads a numeric argument (a JSON number or a numeric string).
func (c *Call) argFloat(name string) (float64, bool, error) {
	v, ok := c.With[name]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float64:
		return x, true, nil
	case int:
		return float64(x), true, nil
	case int64:
		return float64(x), true, nil
	case json.Number:
		f, err := x.Float64()
		return f, true, err
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, true, fmt.Errorf("with.%s: %q is not a number", name, x)
		}
		return f, true, nil
	}
	return 0, true, fmt.Errorf("with.%s: want a number, got %T", name, v)
}

// Builtins returns the handlers every stock agent registers, for trying and
// measuring a fleet:
//
//	noop                      succeeds at once
//	sleep  {duration: 1s}     waits (honouring cancellation), then succeeds
//	flaky  {fail_attempts: N} fails an item's first N attempts of the step
//	flaky  {fail_rate: 0.1, seed: 7}
//	                          fails each (item, attempt) with that probability,
//	                          deterministically from seed, item id and attempt
//	flaky  {..., message: "connection reset"}  the error text (default is a
//	                          network error, so the network matcher retries it)
//	flaky  {permanent_rate: 0.1, seed: 7}  fails every attempt of that share of
//	                          items with a permanent error (straight to the DLQ)
func Builtins() map[string]HandlerFunc {
	return map[string]HandlerFunc{
		"noop":  func(context.Context, *Call) (any, error) { return nil, nil },
		"sleep": sleepHandler,
		"flaky": flakyHandler,
	}
}

func sleepHandler(ctx context.Context, c *Call) (any, error) {
	raw, ok := c.With["duration"]
	if !ok {
		return nil, retry.Permanent(errors.New("sleep: with.duration is required"))
	}
	s, _ := raw.(string)
	d, err := messages.ParseDuration(s)
	if err != nil {
		return nil, retry.Permanent(fmt.Errorf("sleep: with.duration: %w", err))
	}
	t := time.NewTimer(d.D())
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

const defaultFlakyMessage = "connection reset by peer (simulated by flaky)"

func flakyHandler(_ context.Context, c *Call) (any, error) {
	msg := defaultFlakyMessage
	if m, ok := c.With["message"].(string); ok && m != "" {
		msg = m
	}
	seed, _, err := c.argFloat("seed")
	if err != nil {
		return nil, retry.Permanent(err)
	}
	if pr, ok, err := c.argFloat("permanent_rate"); err != nil {
		return nil, retry.Permanent(err)
	} else if ok && chance(uint64(seed), c.ItemID, 0) < pr {
		return nil, retry.Permanent(fmt.Errorf("flaky: permanent failure of item %s (simulated)", c.ItemID))
	}
	if n, ok, err := c.argFloat("fail_attempts"); err != nil {
		return nil, retry.Permanent(err)
	} else if ok && float64(c.Attempt) <= n {
		return nil, fmt.Errorf("%s [attempt %d of %d failing]", msg, c.Attempt, int(n))
	}
	if rate, ok, err := c.argFloat("fail_rate"); err != nil {
		return nil, retry.Permanent(err)
	} else if ok && chance(uint64(seed), c.ItemID, c.Attempt) < rate {
		return nil, errors.New(msg)
	}
	return "ok", nil
}

// chance maps (seed, item, attempt) to a stable number in [0, 1).
func chance(seed uint64, item string, attempt int) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(attempt))
	h.Write(b[:])
	h.Write([]byte(item))
	// FNV's high bits barely change between inputs that differ only at
	// the end ("img-0001", "img-0002"): mix them (splitmix64's finaliser).
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(uint64(1)<<53)
}
