package ui

import "errors"

// Sentinel errors.
var (
	// ErrRemoteListen is returned for a listen address other machines can
	// reach when Config.AllowRemote is not set.
	ErrRemoteListen = errors.New("ui: not a loopback address; other machines could reach the dashboard (allow it explicitly)")
	// ErrReadOnly is the refusal of an action in read-only mode.
	ErrReadOnly = errors.New("ui: the dashboard is read-only")
	// ErrCSRF is the refusal of a form post without a valid token.
	ErrCSRF = errors.New("ui: missing or invalid CSRF token (reload the page and try again)")
)
