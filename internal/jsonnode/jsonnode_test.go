package jsonnode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadKeepsLinesAndNumbers(t *testing.T) {
	n, fe := Read([]byte("{\n  \"a\": 1e400,\n  \"b\": [true, \"\\ud83d\\ude00\"]\n}"), true)
	require.Nil(t, fe)
	require.Len(t, n.Content, 4)
	require.Equal(t, 2, n.Content[1].Line)
	require.Equal(t, json.Number("1e400"), Scalar(n.Content[1]), "a number stays its text, never a string or +Inf")
	require.Equal(t, "😀", n.Content[3].Content[1].Value)

	_, fe = Read([]byte("{\n \"a\": }"), true)
	require.NotNil(t, fe)
	require.Contains(t, fe.Message, "line 2, column 7")

	_, fe = Read([]byte(strings.Repeat("[", MaxDepth+2)), false)
	require.NotNil(t, fe)
	require.Contains(t, fe.Message, "nested deeper")
}

func TestValues(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{nil, "null"}, {true, "boolean true"}, {"abc", `string "abc"`}, {json.Number("5"), "number 5"},
		{map[string]any{}, "object"}, {[]any{}, "array"}, {3, "unsupported value of type int"},
	} {
		require.Equal(t, tc.want, Describe(tc.v))
	}
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"7", 7, ""}, {"2.0", 2, ""}, {"1e3", 1000, ""}, {"2.5", 0, "expected an integer"}, {"1e300", 0, "out of range"},
	} {
		got, err := AsInt(json.Number(tc.in))
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got)
	}
}
