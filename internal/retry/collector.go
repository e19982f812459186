package retry

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// MaxSummaryItems bounds the item ids kept per error signature in a summary.
const MaxSummaryItems = 100

// MaxSummarySignatures bounds the signatures a summary groups errors by:
// errors of signatures first seen after that many are counted by
// [Collector.Other] only, so that a job whose every error differs cannot
// make the summary as large as the job.
const MaxSummarySignatures = 1000

// ErrorEvent is one item error, as collected and emitted.
type ErrorEvent struct {
	ItemID  string `json:"item_id"`
	Class   string `json:"class,omitempty"`
	Message string `json:"message"`
	// Signature is filled by the collector ([Signature] of Message) when empty.
	Signature string `json:"signature"`
}

// Collector implements error_collection. Every mode keeps a summary grouped
// by signature for the final report ([Collector.Summary]); what
// [Collector.Add] hands back to emit now differs: aggregate nothing,
// immediate each error, batched{size} every size errors (and
// [Collector.Flush] the rest when the job ends). It is safe for concurrent use.
type Collector struct {
	mu      sync.Mutex
	mode    string
	size    int
	pending []ErrorEvent
	groups  map[string]*messages.ErrorSummary
	order   []string
	other   int64
}

// checkCollection validates an error_collection value.
func checkCollection(ec *messages.ErrorCollection) error {
	var ce ConfigError
	switch ec.Mode {
	case "", messages.CollectAggregate, messages.CollectImmediate:
	case messages.CollectBatched:
		if ec.BatchSize < 1 {
			ce.add("batched.size", "must be >= 1, got %d", ec.BatchSize)
		}
	default:
		ce.add("", "must be aggregate, immediate or {batched: {size: N}}, got %q", ec.Mode)
	}
	return ce.err()
}

// NewCollector returns an empty collector (nil = aggregate).
func NewCollector(ec *messages.ErrorCollection) (*Collector, error) {
	c := &Collector{mode: messages.CollectAggregate, groups: map[string]*messages.ErrorSummary{}}
	if ec == nil {
		return c, nil
	}
	if err := checkCollection(ec); err != nil {
		return nil, err
	}
	if ec.Mode != "" {
		c.mode, c.size = ec.Mode, ec.BatchSize
	}
	return c, nil
}

// Add records an error and returns the events to emit now.
func (c *Collector) Add(ev ErrorEvent) []ErrorEvent {
	if ev.Signature == "" {
		ev.Signature = Signature(ev.Message)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[ev.Signature]
	if !ok && len(c.groups) < MaxSummarySignatures {
		g = &messages.ErrorSummary{Signature: ev.Signature, Class: ev.Class, Message: ev.Message}
		c.groups[ev.Signature] = g
		c.order = append(c.order, ev.Signature)
	}
	if g == nil {
		c.other++
	} else {
		g.Count++
		if ev.ItemID != "" && len(g.Items) < MaxSummaryItems {
			g.Items = append(g.Items, ev.ItemID)
		}
	}
	switch c.mode {
	case messages.CollectImmediate:
		return []ErrorEvent{ev}
	case messages.CollectBatched:
		c.pending = append(c.pending, ev)
		if len(c.pending) >= c.size {
			out := c.pending
			c.pending = nil
			return out
		}
	}
	return nil
}

// Other is the number of errors whose signature is not in the summary
// (first seen after MaxSummarySignatures others).
func (c *Collector) Other() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.other
}

// Flush returns the events not emitted yet (a partial batch) and forgets them.
func (c *Collector) Flush() []ErrorEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.pending
	c.pending = nil
	return out
}

// Summary returns the errors grouped by signature, most frequent first (ties
// in order of first appearance), each with the first message and class seen
// and up to [MaxSummaryItems] item ids.
func (c *Collector) Summary() []messages.ErrorSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]messages.ErrorSummary, 0, len(c.order))
	for _, sig := range c.order {
		g := *c.groups[sig]
		g.Items = slices.Clone(g.Items)
		out = append(out, g)
	}
	slices.SortStableFunc(out, func(a, b messages.ErrorSummary) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return 0
	})
	return out
}

// Restore merges a summary saved earlier (e.g. from the job's status after a
// coordinator restart) into c.
func (c *Collector) Restore(sums []messages.ErrorSummary) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for i, s := range sums {
		if s.Signature == "" || s.Count < 0 {
			errs = append(errs, fmt.Errorf("retry: summary %d: needs a signature and a count >= 0", i))
			continue
		}
		g, ok := c.groups[s.Signature]
		if !ok {
			g = &messages.ErrorSummary{Signature: s.Signature, Class: s.Class, Message: s.Message}
			c.groups[s.Signature] = g
			c.order = append(c.order, s.Signature)
		}
		g.Count += s.Count
		for _, id := range s.Items {
			if len(g.Items) < MaxSummaryItems {
				g.Items = append(g.Items, id)
			}
		}
	}
	return errors.Join(errs...)
}
