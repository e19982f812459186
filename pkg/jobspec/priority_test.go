package jobspec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestPriority(t *testing.T) {
	tests := []struct {
		name    string
		field   string // the priority field as written, "" for none
		want    int
		wantErr bool
	}{
		{"unset is the default", "", messages.DefaultPriority, false},
		{"lowest", `"priority": 0,`, 0, false},
		{"highest", `"priority": 9,`, 9, false},
		{"above the range", `"priority": 10,`, 0, true},
		{"below the range", `"priority": -1,`, 0, true},
		{"not a number", `"priority": "high",`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := jobspec.Parse([]byte(`{` + tt.field + `"items": [1], "agent_template": [{"handler": "h"}]}`))
			if !tt.wantErr {
				require.NoError(t, err)
				require.Equal(t, tt.want, wire.EffectivePriority(spec))
				return
			}
			var ve *messages.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, "priority", ve.Problems[0].Field, ve.Problems[0].Message)
		})
	}
}
