package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestDecodeResults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		want    []int64
		wantErr bool
	}{
		{"one result", `{"job_id":"j","item_id":"a","index":3,"outcome":"succeeded"}`, []int64{3}, false},
		{"a batch", ` [{"index":1,"outcome":"succeeded"},{"index":2,"outcome":"failed"}]`, []int64{1, 2}, false},
		{"an empty batch", `[]`, nil, false},
		{"neither", `"x"`, nil, true},
		{"empty", ``, nil, true},
		{"broken", `[{"index":1}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := wire.DecodeResults([]byte(tc.data), nil)
			if tc.wantErr {
				require.Error(t, err)
				require.Empty(t, rs)
				return
			}
			require.NoError(t, err)
			var got []int64
			for _, r := range rs {
				got = append(got, r.Index)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// A reused slice never lends one result's fields to the next.
func TestDecodeResultsZeroesWhatItReuses(t *testing.T) {
	rs, err := wire.DecodeResults([]byte(`[{"index":1,"group":"g","error":"boom"},{"index":2,"reason":"r"}]`), nil)
	require.NoError(t, err)
	rs, err = wire.DecodeResults([]byte(`[{"index":5},{"index":6}]`), rs)
	require.NoError(t, err)
	require.Equal(t, []messages.Result{{Index: 5}, {Index: 6}}, rs)
	rs, err = wire.DecodeResults([]byte(`{"index":7}`), rs)
	require.NoError(t, err)
	require.Equal(t, []messages.Result{{Index: 7}}, rs)
}

func TestResultBatch(t *testing.T) {
	var b wire.ResultBatch
	require.True(t, b.Fits(1000, 10), "an empty batch takes any result")
	b.Add([]byte(`{"index":1}`))
	require.False(t, b.Fits(11, 24), `[{"index":1},{"index":2}] is 25 bytes`)
	require.True(t, b.Fits(11, 25))
	b.Add([]byte(`{"index":2}`))
	require.Equal(t, 2, b.Len())
	rs, err := wire.DecodeResults(b.Payload(), nil)
	require.NoError(t, err)
	require.Equal(t, []messages.Result{{Index: 1}, {Index: 2}}, rs)
}
