package wire

import (
	"testing"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestPauseKeys(t *testing.T) {
	tests := []struct {
		key, kind, name string
		ok              bool
	}{
		{PauseJobKey("nightly"), messages.PausedByJob, "nightly", true},
		{PausePoolKey("gpu"), messages.PausedByPool, "gpu", true},
		{"job.", "", "", false},
		{"leader", "", "", false},
	}
	for _, tt := range tests {
		kind, name, ok := ParsePauseKey(tt.key)
		if kind != tt.kind || name != tt.name || ok != tt.ok {
			t.Errorf("ParsePauseKey(%q) = %q, %q, %v; want %q, %q, %v", tt.key, kind, name, ok, tt.kind, tt.name, tt.ok)
		}
	}
}
