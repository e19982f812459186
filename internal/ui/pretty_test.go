package ui

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrettyJSON(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"object keeps key order", `{"b":1,"a":[true,null,"x"],"c":{}}`, "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null,\n    \"x\"\n  ],\n  \"c\": {}\n}"},
		{"html escapes shown as text", `{"id":"\u003cscript\u003e\u0026"}`, "{\n  \"id\": \"<script>&\"\n}"},
		{"big numbers kept", `[12345678901234567890, 1.5e300]`, "[\n  12345678901234567890,\n  1.5e300\n]"},
		{"scalar", `"plain"`, `"plain"`},
		{"not json", `{"a":`, `{"a":`},
		{"two values", `1 2`, `1 2`},
		{"empty", ``, ``},
		{"nested empty array", `{"a":[]}`, "{\n  \"a\": []\n}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := prettyJSON([]byte(tt.in))
			require.Equal(t, tt.want, got)
			if json.Valid([]byte(tt.in)) {
				require.True(t, json.Valid([]byte(got)), got)
			}
		})
	}
}

func FuzzPrettyJSON(f *testing.F) {
	f.Add(`{"a":[1,{"b":"<x>"}],"c":null}`)
	f.Fuzz(func(t *testing.T, in string) {
		got := prettyJSON([]byte(in))
		if json.Valid([]byte(in)) {
			var a, b any
			require.NoError(t, json.Unmarshal([]byte(in), &a))
			require.NoError(t, json.Unmarshal([]byte(got), &b), got)
			require.Equal(t, a, b)
		}
	})
}
