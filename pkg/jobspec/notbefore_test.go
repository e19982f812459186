package jobspec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestNotBefore(t *testing.T) {
	tests := []struct {
		name, value string
		wantErr     bool
	}{
		{"rfc 3339 time", "2026-11-27T02:00:00Z", false},
		{"time with offset", "2026-11-27T02:00:00+01:00", false},
		{"duration", "1h30m", false},
		{"not a time", "tomorrow", true},
		{"negative duration", "-5m", true},
		{"date without time", "2026-11-27", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte(`{"not_before": "` + tt.value + `", "items": [1], "agent_template": [{"handler": "h"}]}`))
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			var ve *messages.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, "not_before", ve.Problems[0].Field, ve.Problems[0].Message)
		})
	}
}
