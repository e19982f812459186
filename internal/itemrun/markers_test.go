package itemrun

import "github.com/jetfleet/jetfleet/pkg/retry"

// Marker errors a handler returns to steer its retries, and how to read
// them back (in a handler's test, or in a middleware that logs them).
// They are package retry's (the same functions): docs/retries.md §6 says
// what each one does.
var (
	// Permanent is [retry.Permanent]: give up at once, reason "permanent".
	Permanent = retry.Permanent
	// IsPermanent is [retry.IsPermanent].
	IsPermanent = retry.IsPermanent
	// After is [retry.After]: retry after the handler's delay (Retry-After).
	After = retry.After
	// AfterDelay is [retry.AfterDelay].
	AfterDelay = retry.AfterDelay
	// Snooze is [retry.Snooze]: run again later without spending an attempt.
	Snooze = retry.Snooze
	// SnoozeDelay is [retry.SnoozeDelay].
	SnoozeDelay = retry.SnoozeDelay
)
