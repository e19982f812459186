package jspub

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplySubjects(t *testing.T) {
	require.Empty(t, replySubjects("_INBOX.x.7.", 0))
	got := replySubjects("_INBOX.x.7.", 12)
	require.Len(t, got, 12)
	for i, s := range got {
		require.Equal(t, "_INBOX.x.7."+strconv.Itoa(i), s)
	}
}
