// Package examples embeds the sample job specs so that fleetctl demo works
// from any directory.
package examples

import "embed"

// FS holds every *.yaml and *.json file of this directory.
//
//go:embed *.yaml *.json
var FS embed.FS
