package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimitCommands(t *testing.T) {
	t.Parallel()
	url, _ := dlqFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	code, out, errOut := cliCtx(ctx, url, "limit", "set", "api", "--rate", "40/s", "--concurrency", "6", "--adaptive")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "40/s configured")

	code, out, errOut = cliCtx(ctx, url, "limit", "get", "api", "--json")
	require.Equal(t, exitOK, code, errOut)
	var v limitView
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, limitView{Name: "api", Named: true, Rate: 40, CurrentRate: 40, Burst: 40, Tokens: 36, Concurrency: 6, Adaptive: true}, v,
		"burst defaults to one second of rate; a new limit starts full (less limit.TransitMargin of rate)")

	// Changed while in use: the new rate applies, the tokens stay.
	code, _, errOut = cliCtx(ctx, url, "limit", "set", "api", "--rate", "600/m", "--burst", "3")
	require.Equal(t, exitOK, code, errOut)
	code, out, _ = cliCtx(ctx, url, "limit", "list", "--json")
	require.Equal(t, exitOK, code)
	var vs []limitView
	require.NoError(t, json.Unmarshal([]byte(out), &vs))
	require.Len(t, vs, 1)
	require.Equal(t, 10.0, vs[0].CurrentRate)
	require.Equal(t, 2.0, vs[0].Tokens, "at most the new burst, less the margin")
	require.False(t, vs[0].Adaptive)

	code, out, _ = cliCtx(ctx, url, "limit", "list")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "api")

	for _, bad := range [][]string{
		{"limit", "set", "api", "--rate", "40/d"},
		{"limit", "set", "a b", "--rate", "4/s"},
		{"limit", "set", "api"},
		{"limit", "set", "api", "--concurrency", "2", "--burst", "4"},
	} {
		code, _, errOut = cliCtx(ctx, url, bad...)
		require.Equal(t, exitUsage, code, "%v: %s", bad, errOut)
		require.NotEmpty(t, errOut)
	}

	code, _, errOut = cliCtx(ctx, url, "limit", "rm", "api")
	require.Equal(t, exitOK, code, errOut)
	code, _, errOut = cliCtx(ctx, url, "limit", "get", "api")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, `no limit "api"`)
	code, _, _ = cliCtx(ctx, url, "limit", "rm", "api")
	require.Equal(t, exitFailed, code)
}

func TestParseShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     map[string]int
		wantErr  string
	}{
		{name: "unset keeps them", in: "", want: nil},
		{name: "dash clears them", in: "-", want: map[string]int{}},
		{name: "weights", in: "gpu=3, cpu=1", want: map[string]int{"gpu": 3, "cpu": 1}},
		{name: "no weight", in: "gpu", wantErr: `"gpu": want pool=weight`},
		{name: "zero", in: "gpu=0", wantErr: `pool gpu: weight "0", want 1 to 1000`},
		{name: "bad pool", in: "a.b=2", wantErr: `pool "a.b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseShares(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
