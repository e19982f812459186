package prodigystep

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandlerOptions(t *testing.T) {
	tests := []struct {
		name     string
		h        map[string]any
		want     map[string]any
		problems []string // fields
		warnings []string
	}{
		{"commands only", map[string]any{"shell": "fix"}, map[string]any{}, nil, nil},
		{"reruns", map[string]any{"claude": "/fix", "max_attempts": json.Number("3"), "fail_workflow": false},
			map[string]any{"max_attempts": json.Number("3")}, nil, nil},
		{"max_retries is max_attempts", map[string]any{"shell": "fix", "max_retries": json.Number("2")},
			map[string]any{"max_attempts": json.Number("2")}, nil, nil},
		{"one run sets nothing", map[string]any{"shell": "fix", "max_attempts": json.Number("1")}, map[string]any{}, nil, nil},
		{"the detailed form's options", map[string]any{"commands": []any{"a"}, "handler_failure_fatal": true, "timeout": json.Number("300"),
			"commit_required": true, "fail_workflow": true, "strategy": "recovery", "retry_original": true},
			map[string]any{"handler_failure_fatal": true, "timeout": "5m", "commit_required": true, "fail_workflow": true},
			nil, []string{"retry_original", "strategy"}},
		{"a duration", map[string]any{"shell": "fix", "timeout": "90s"}, map[string]any{"timeout": "1m30s"}, nil, nil},
		{"refusals", map[string]any{"shell": "fix", "max_attempts": json.Number("0"), "timeout": json.Number("0"), "capture": map[string]any{"log": "handler_output"},
			"handler_failure_fatal": "yes", "continue_on_error": true},
			map[string]any{}, []string{"capture", "continue_on_error", "handler_failure_fatal", "max_attempts", "timeout"}, nil},
		{"both names", map[string]any{"shell": "fix", "max_attempts": json.Number("2"), "max_retries": json.Number("2")},
			map[string]any{"max_attempts": json.Number("2")}, []string{"max_retries"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, r := HandlerOptions(tt.h)
			require.Equal(t, tt.want, fb)
			var problems, warnings []string
			for _, p := range r.Problems {
				problems = append(problems, p.Field)
			}
			for _, w := range r.Warnings {
				warnings = append(warnings, w.Field)
			}
			require.Equal(t, tt.problems, problems)
			require.Equal(t, tt.warnings, warnings)
		})
	}
}
