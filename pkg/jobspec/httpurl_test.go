package jobspec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An http step's url is checked at submission: an http or https URL whose
// scheme, host and port are written out before any value.
func TestHTTPStepURL(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"file", `"file:///etc/passwd"`, `the scheme "file" is not http or https`},
		{"host from a value", `"https://${item.host}/hook"`, "a value may not stand in the host or port"},
		{"host end from a value", `"http://api.example.com${item.p}/leak"`, "a value may not stand in the host or port"},
		{"all from a value", `"${item.url}"`, "the scheme and host must be written out"},
		{"user info", `"https://u:p@api.example.com/x"`, "user information"},
		{"not a URL", `"api.example.com/x"`, "is not an http or https URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte("items: [1]\nagent_template:\n  - handler: http\n    with: {url: " + tc.url + "}\n"))
			var ve *messages.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, "agent_template[0].with.url", ve.Problems[0].Field, "%v", err)
			require.Contains(t, ve.Problems[0].Message, tc.want)
		})
	}
	for _, ok := range []string{
		`"https://api.example.com/users/${item.id}?fields=${item.f}"`,
		`"http://127.0.0.1:8080?q=${item.q}"`,
		`"https://api.example.com"`,
	} {
		_, err := jobspec.Parse([]byte("items: [1]\nagent_template:\n  - handler: http\n    with: {url: " + ok + "}\n"))
		require.NoError(t, err, ok)
	}
}
