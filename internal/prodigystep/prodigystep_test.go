package prodigystep

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewrite(t *testing.T) {
	cases := []struct {
		name     string
		step     map[string]any
		prodigy  bool
		want     map[string]any
		warnings []string
	}{
		{
			name:     "fields without effect",
			step:     map[string]any{"claude": "/x", "description": "d", "outputs": map[string]any{}, "validate": map[string]any{}, "args": []any{"a"}},
			prodigy:  true,
			want:     map[string]any{"claude": "/x"},
			warnings: []string{"args", "description", "outputs", "validate"},
		},
		{
			name:    "jetfleet's layout leaves them to the decoder",
			step:    map[string]any{"shell": "x", "description": "d"},
			want:    map[string]any{"shell": "x", "description": "d"},
			prodigy: false,
		},
		{
			name:     "analyze does nothing",
			step:     map[string]any{"analyze": map[string]any{"max_cache_age": json.Number("5")}},
			prodigy:  true,
			want:     map[string]any{"shell": ":"},
			warnings: []string{"analyze"},
		},
		{
			name:     "files_added is its pattern",
			step:     map[string]any{"shell": "ls ${step.files_added:specs/*.md} ${ step.files_added }"},
			prodigy:  true,
			want:     map[string]any{"shell": "ls specs/*.md "},
			warnings: []string{"shell"},
		},
		{
			name: "foreach in Prodigy's form",
			step: map[string]any{"foreach": map[string]any{"foreach": []any{"a", json.Number("2")}, "parallel": true, "do": []any{}}},
			want: map[string]any{"foreach": map[string]any{"items": []any{"a", "2"}, "parallel": json.Number("10"), "do": []any{}}},
		},
		{
			name: "foreach over a command, sequential",
			step: map[string]any{"foreach": map[string]any{"items": "ls", "parallel": false, "do": []any{}}},
			want: map[string]any{"foreach": map[string]any{"command": "ls", "do": []any{}}},
		},
		{
			name: "exit-code handlers as commands, reading the step's capture",
			step: map[string]any{"shell": "x", "capture_output": "out", "on_exit_code": map[string]any{"0": "echo ${out}", "2": "/fix ${out|length:10} $${out}"}},
			want: map[string]any{"shell": "x", "capture_output": "out", "on_exit_code": map[string]any{
				"0": map[string]any{"shell": "echo ${shell.output}"}, "2": map[string]any{"claude": "/fix ${shell.output|length:10} $${out}"}}},
		},
		{
			name:    "a variable the script assigns is the shell's",
			step:    map[string]any{"shell": "n=$((a+1))\necho ${n}% ${item.x} $${n}\nfor f in x; do m=1; done; echo ${m} ${other}"},
			prodigy: true,
			want:    map[string]any{"shell": "n=$((a+1))\necho $${n}% ${item.x} $${n}\nfor f in x; do m=1; done; echo $${m} ${other}"},
		},
		{
			name:     "${shell.stderr} in a handler",
			step:     map[string]any{"shell": "x", "on_failure": map[string]any{"claude": "/fix ${shell.stderr}"}},
			want:     map[string]any{"shell": "x", "on_failure": map[string]any{"claude": "/fix ${shell.output}"}},
			warnings: []string{"on_failure"},
		},
		{
			name: "a claude on_success is exit code 0's handler",
			step: map[string]any{"shell": "a", "on_success": map[string]any{"claude": "/doc"}},
			want: map[string]any{"shell": "a", "on_exit_code": map[string]any{"0": map[string]any{"claude": "/doc"}}},
		},
		{
			name:     "nested on_success",
			step:     map[string]any{"shell": "a", "on_success": map[string]any{"shell": "b", "on_success": map[string]any{"shell": "c", "on_failure": "d"}}},
			want:     map[string]any{"shell": "a", "on_success": map[string]any{"shell": "set -e\nb\nc"}},
			warnings: []string{"on_success.on_success.on_failure"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Rewrite(c.step, c.prodigy)
			require.Empty(t, r.Problems)
			require.Equal(t, c.want, c.step)
			var got []string
			for _, w := range r.Warnings {
				got = append(got, w.Field)
			}
			require.Equal(t, c.warnings, got)
		})
	}
}
