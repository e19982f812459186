package jobspec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestStepLimit(t *testing.T) {
	spec, err := jobspec.Parse([]byte(`
items: [{host: a}]
agent_template:
  - handler: http
    limit: api
  - handler: http
    limit: {key: "api:${item.host}", rate: 40/s, burst: 10, concurrency: 6, adaptive: true}
  - handler: http
    limit: {key: "t", rate: 120/m}
`))
	require.NoError(t, err)
	require.Equal(t, &messages.StepLimit{Name: "api"}, spec.AgentTemplate[0].Limit)
	require.Equal(t, &messages.StepLimit{Key: "api:${item.host}", LimitConfig: messages.LimitConfig{Rate: 40, Burst: 10, Concurrency: 6, Adaptive: true}},
		spec.AgentTemplate[1].Limit)
	require.Equal(t, messages.Rate(2), spec.AgentTemplate[2].Limit.Rate)
}

func TestStepLimitErrors(t *testing.T) {
	for _, tc := range []struct {
		name, limit, field string
	}{
		{"bad name", `"a b"`, "agent_template[0].limit"},
		{"bad rate", `{key: k, rate: 40/d}`, "agent_template[0].limit.rate"},
		{"zero rate", `{key: k, rate: 0/s}`, "agent_template[0].limit.rate"},
		{"unknown field", `{key: k, rate: 4/s, burts: 3}`, "agent_template[0].limit.burts"},
		{"no key", `{rate: 4/s}`, "agent_template[0].limit.key"},
		{"env in key", `{key: "${env.X}", rate: 4/s}`, "agent_template[0].limit.key"},
		{"nothing limited", `{key: k}`, "agent_template[0].limit.rate"},
		{"burst without rate", `{key: k, concurrency: 2, burst: 3}`, "agent_template[0].limit.burst"},
		{"negative concurrency", `{key: k, concurrency: -1}`, "agent_template[0].limit.concurrency"},
		{"adaptive without rate", `{key: k, concurrency: 2, adaptive: true}`, "agent_template[0].limit.adaptive"},
		{"not a limit", `[1]`, "agent_template[0].limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte("items: [1]\nagent_template:\n  - handler: http\n    limit: " + tc.limit + "\n"))
			var ve *messages.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			var fields []string
			for _, p := range ve.Problems {
				fields = append(fields, p.Field)
			}
			require.Contains(t, fields, tc.field, "%v", err)
		})
	}
}
