// Package apisurface holds the tests that keep jetfleet's public Go
// surface deliberate: every exported identifier of a pkg/ package is
// named in docs/design.md's "Public API" section, that section names
// nothing that is gone, and no example in pkg/ imports internal/. It has
// no code of its own.
package apisurface
