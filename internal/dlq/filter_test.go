package dlq_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestMatcher(t *testing.T) {
	e := entry("nightly", 7, "network", "connection refused by db-7")
	e.Attempts[0].Message = "tls handshake timeout"
	at := e.DeadLetteredAt
	for _, tc := range []struct {
		name string
		f    messages.DLQFilter
		want bool
	}{
		{"empty filter", messages.DLQFilter{}, true},
		{"job", messages.DLQFilter{JobID: "nightly"}, true},
		{"other job", messages.DLQFilter{JobID: "daily"}, false},
		{"reason", messages.DLQFilter{Reason: messages.ReasonAttempts}, true},
		{"other reason", messages.DLQFilter{Reason: messages.ReasonMaxDeliveries}, false},
		{"class, any case", messages.DLQFilter{ErrorClass: "NETWORK"}, true},
		{"other class", messages.DLQFilter{ErrorClass: "timeout"}, false},
		{"signature", messages.DLQFilter{Signature: e.Signature}, true},
		{"signature prefix", messages.DLQFilter{Signature: e.Signature[:6]}, true},
		{"other signature", messages.DLQFilter{Signature: "ffff"}, false},
		{"text in error", messages.DLQFilter{Text: "DB-7"}, true},
		{"text in item id", messages.DLQFilter{Text: "item-007"}, true},
		{"text in payload", messages.DLQFilter{Text: `"n":7`}, true},
		{"text in an attempt", messages.DLQFilter{Text: "handshake"}, true},
		{"text nowhere", messages.DLQFilter{Text: "quota"}, false},
		{"since inclusive", messages.DLQFilter{Since: at}, true},
		{"since later", messages.DLQFilter{Since: at.Add(time.Nanosecond)}, false},
		{"until exclusive", messages.DLQFilter{Until: at}, false},
		{"until later", messages.DLQFilter{Until: at.Add(time.Second)}, true},
		{"all at once", messages.DLQFilter{JobID: "nightly", ErrorClass: "network", Text: "refused", Since: at.Add(-time.Hour), Until: at.Add(time.Hour)}, true},
		{"all but one", messages.DLQFilter{JobID: "nightly", ErrorClass: "network", Text: "refused", Reason: "poison"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, dlq.NewMatcher(tc.f).Match(e))
		})
	}
}

func TestValidateFilter(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		f     messages.DLQFilter
		field string
	}{
		{"ok", messages.DLQFilter{JobID: "a-b_c", Since: now, Until: now.Add(time.Second), Limit: 5}, ""},
		{"job not a token", messages.DLQFilter{JobID: "a.b"}, "job_id"},
		{"until before since", messages.DLQFilter{Since: now, Until: now.Add(-time.Second)}, "until"},
		{"until equal since", messages.DLQFilter{Since: now, Until: now}, "until"},
		{"negative limit", messages.DLQFilter{Limit: -1}, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dlq.ValidateFilter(tc.f)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, dlq.ErrBadFilter)
			var fe *dlq.FilterError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tc.field, fe.Field)
		})
	}
}
