package itemrun

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCommandItems(t *testing.T) {
	tests := []struct {
		name string
		out  string
		wrap bool
		want string
	}{
		{name: "a JSON array as it is", out: " [1, {\"a\": 2}]\n", wrap: true, want: `[1, {"a": 2}]`},
		{name: "a single value is one item", out: `{"a": 1}`, wrap: true, want: `[{"a": 1}]`},
		{name: "a single value read by json_path", out: `{"jobs": [1]}`, wrap: false, want: `{"jobs": [1]}`},
		{name: "lines", out: "one\n\n two \n", wrap: true, want: `[{"item":"one"},{"item":"two"}]`},
		{name: "lines of JSON and text", out: "{\"k\": 1}\nplain\n7\n", wrap: true, want: `[{"k": 1},{"item":"plain"},7]`},
		{name: "no output", out: "", wrap: true, want: `[]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, string(commandItems([]byte(tt.out), tt.wrap)))
		})
	}
}
