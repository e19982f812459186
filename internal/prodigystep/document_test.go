package prodigystep

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDocument(t *testing.T) {
	step := map[string]any{"name": "a", "shell": "echo"}
	cases := []struct {
		name     string
		doc      map[string]any
		want     map[string]any
		warnings []string
	}{
		{
			name:     "steps are a standard workflow's commands",
			doc:      map[string]any{"name": "w", "description": "d", "steps": []any{step}},
			want:     map[string]any{"name": "w", "commands": []any{step}},
			warnings: []string{"steps", "description"},
		},
		{
			name: "steps beside commands stay, for the decoder to refuse",
			doc:  map[string]any{"commands": []any{step}, "steps": []any{step}},
			want: map[string]any{"commands": []any{step}, "steps": []any{step}},
		},
		{
			name: "steps that are not steps stay",
			doc:  map[string]any{"steps": []any{"echo"}},
			want: map[string]any{"steps": []any{"echo"}},
		},
		{
			name: "jetfleet's layout keeps its description refused",
			doc:  map[string]any{"description": "d", "agent_template": []any{step}},
			want: map[string]any{"description": "d", "agent_template": []any{step}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Document(tc.doc)
			require.Equal(t, tc.want, tc.doc)
			var got []string
			for _, w := range r.Warnings {
				got = append(got, w.Field)
			}
			require.Equal(t, tc.warnings, got)
			require.Empty(t, r.Problems)
		})
	}
}
