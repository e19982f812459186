package budget

import (
	"errors"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

var (
	// ErrExhausted matches every *Deny: errors.Is(deny, ErrExhausted).
	ErrExhausted = errors.New("budget: exhausted")
	// ErrNotFound is returned when a job has no budget record.
	ErrNotFound = errors.New("budget: no budget record")
	// ErrClosed is returned by a Budget after Close.
	ErrClosed = errors.New("budget: closed")
	// ErrInvalidRecord is returned for a record that cannot be stored or
	// that was read back malformed.
	ErrInvalidRecord = errors.New("budget: invalid record")
	// ErrInvalidJob is returned for a key that is neither a job id (a
	// subject token) nor <pool>.<job> ([Key]).
	ErrInvalidJob = errors.New("budget: invalid job id")
)

// Scopes of a denial, as used in the exhausted metric.
const (
	ScopeItem = "item"
	ScopeJob  = "job"
)

// Deny says why a claim was refused. It is an error (matching ErrExhausted)
// so a caller can join it with the item's last error. A Deny is an
// immutable value, safe to share.
type Deny struct {
	// Reason is messages.ReasonItemBudget or messages.ReasonJobBudget.
	Reason string
	// Consumed and Limit are the item's retries and its cap for an item
	// denial, the job's consumed units and its total for a job denial.
	Consumed int
	Limit    int
}

// Scope is ScopeItem or ScopeJob.
func (d *Deny) Scope() string {
	if d.Reason == messages.ReasonItemBudget {
		return ScopeItem
	}
	return ScopeJob
}

func (d *Deny) Error() string {
	return fmt.Sprintf("budget: %s (%d of %d retries used)", d.Reason, d.Consumed, d.Limit)
}

// Is makes errors.Is(d, ErrExhausted) true.
func (d *Deny) Is(target error) bool { return target == ErrExhausted }

// Grant is the outcome of a Claim: either one retry granted, or a Deny.
// It is a plain value, safe to copy.
type Grant struct {
	// Granted is true when the caller may retry (the unit is recorded in KV).
	Granted bool
	// Deny is set exactly when Granted is false.
	Deny *Deny
}

var granted = Grant{Granted: true}

func denyItem(retries, limit int) Grant {
	return Grant{Deny: &Deny{Reason: messages.ReasonItemBudget, Consumed: retries, Limit: limit}}
}

func denyJob(consumed, limit int) Grant {
	return Grant{Deny: &Deny{Reason: messages.ReasonJobBudget, Consumed: consumed, Limit: limit}}
}
