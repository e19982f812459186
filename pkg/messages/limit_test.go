package messages_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    messages.Rate
		wantErr bool
	}{
		{"40/s", 40, false},
		{"600/m", 10, false},
		{"3600/h", 1, false},
		{"2.5", 2.5, false},
		{" 40 / s ", 40, false},
		{"40/d", 0, true},
		{"0/s", 0, true},
		{"-1/s", 0, true},
		{"fast", 0, true},
		{"NaN/s", 0, true},
		{"2e6/s", 0, true},
	} {
		got, err := messages.ParseRate(tc.in)
		if tc.wantErr {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestStepLimitJSON(t *testing.T) {
	for _, l := range []messages.StepLimit{
		{Name: "api"},
		{Key: "t:${item.tenant}", LimitConfig: messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6, Adaptive: true}},
	} {
		b, err := json.Marshal(l)
		require.NoError(t, err)
		var back messages.StepLimit
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, l, back, string(b))
	}
	b, _ := json.Marshal(messages.StepLimit{Name: "api"})
	require.Equal(t, `"api"`, string(b))
}
