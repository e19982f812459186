package retry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A single value's problem reads "retry: ..." on its own and lists without
// the prefix under its field in a ConfigError; both match ErrInvalidConfig.
func TestSingleValueProblems(t *testing.T) {
	_, err := CompileMatcher(messages.Matcher{Pattern: "("})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.True(t, strings.HasPrefix(err.Error(), "retry: invalid regex: "), err.Error())
	_, err = NewFailureAction(&messages.OnFailure{Action: "nope"})
	require.ErrorIs(t, err, ErrInvalidConfig)

	_, err = NewPolicy(&messages.RetryConfig{
		RetryOn:   []messages.Matcher{{Builtin: messages.MatchNetwork}, {Pattern: "("}},
		OnFailure: &messages.OnFailure{Action: "nope"},
	})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Problems, 2)
	require.Equal(t, "retry_on[1].pattern", ce.Problems[0].Field)
	require.True(t, strings.HasPrefix(ce.Problems[0].Message, "invalid regex: "), ce.Problems[0].Message)
	require.Equal(t, "on_failure", ce.Problems[1].Field)
	require.True(t, strings.HasPrefix(ce.Problems[1].Message, `unknown action "nope"`), ce.Problems[1].Message)
}
