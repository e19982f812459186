package ui

import "errors"

// Sentinel errors.
var (
	// ErrRemoteListen is returned for a listen address other machines can
	// reach when Config.AllowRemote is not set.
	ErrRemoteListen = errors.New("ui: not a loopback address; other machines could reach the dashboard (allow it explicitly)")
	// ErrReadOnly is the refusal of an action in read-only mode.
	ErrReadOnly = errors.New("ui: the dashboard is read-only")
	// ErrUnauthorized is the refusal of a request without the access token.
	ErrUnauthorized = errors.New("ui: the dashboard needs its access token: open the address printed at start (…/?token=…), or give the token as the password (any user name) or as \"Authorization: Bearer <token>\"")
	// ErrShortToken is returned for a Config.Token shorter than MinTokenLength.
	ErrShortToken = errors.New("ui: the access token is too short")
	// ErrCSRF is the refusal of a form post without a valid token.
	ErrCSRF = errors.New("ui: missing or invalid CSRF token (reload the page and try again)")
)
