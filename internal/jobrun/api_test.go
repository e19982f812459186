package jobrun

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/api"
)

// The API's face marks the jobs' errors with the API's sentinels and keeps
// their text, which some replies show (a bad cursor).
func TestAPIErrorsKeepTheirText(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{name: "bad cursor", err: fmt.Errorf("%w: not base64url", errBadCursor), want: api.ErrBadCursor},
		{name: "no job", err: errNoJob, want: api.ErrNoJob},
		{name: "finished", err: errJobFinished, want: api.ErrJobFinished},
		{name: "map ended", err: errMapEnded, want: api.ErrMapEnded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := asAPIError(tt.err)
			require.ErrorIs(t, got, tt.want)
			require.ErrorIs(t, got, tt.err)
			require.Equal(t, tt.err.Error(), got.Error())
		})
	}
	other := errors.New("boom")
	require.Equal(t, other, asAPIError(other))
	require.NoError(t, asAPIError(nil))
}
