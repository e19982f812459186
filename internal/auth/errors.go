package auth

import "errors"

// Errors returned by the package.
var (
	// ErrUnknownRole is returned for a role name that is none of the four.
	ErrUnknownRole = errors.New("auth: unknown role")
	// ErrExists is returned by Init when a file it would write exists.
	ErrExists = errors.New("auth: files exist")
)
