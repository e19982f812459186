package jobspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

const ad44Steps = "items: [a, b]\nagent_template: [{shell: \"true\"}]\n"

// AD-44's submission fields, in its names and with its meaning of 0.
func TestAD44SubmissionFields(t *testing.T) {
	spec, err := jobspec.Parse([]byte(ad44Steps + `retry_budget: 10
retry_budget_per_workflow: 2
best_effort: true
best_effort_min_dcs: 2
best_effort_deadline_seconds: 90.5
`))
	require.NoError(t, err)
	require.Equal(t, messages.BudgetValue{Count: 10}, *spec.RetryBudget)
	require.Equal(t, messages.BudgetValue{Count: 2}, *spec.RetryBudgetPerItem)
	require.Equal(t, messages.BestEffort{MinGroups: 2, Deadline: messages.Duration(90*time.Second + 500*time.Millisecond)}, *spec.BestEffort)

	t.Run("0 is the default", func(t *testing.T) {
		spec, err := jobspec.Parse([]byte(ad44Steps + "retry_budget_per_workflow: 0\nbest_effort: true\nbest_effort_deadline_seconds: 0\n"))
		require.NoError(t, err)
		require.Nil(t, spec.RetryBudgetPerItem, "AD-44: 0 = use default")
		require.Equal(t, messages.BestEffort{}, *spec.BestEffort, "deadline unset: the operator's default")
		eff := jobspec.WithDefaults(spec)
		require.Equal(t, messages.Duration(jobspec.DefaultBestEffortDeadline), eff.BestEffort.Deadline)
	})
	t.Run("best_effort: false", func(t *testing.T) {
		data := []byte(ad44Steps + "best_effort: false\nbest_effort_min_dcs: 2\n")
		spec, err := jobspec.Parse(data)
		require.NoError(t, err)
		require.Nil(t, spec.BestEffort)
		w := jobspec.Warnings(data)
		require.Len(t, w, 1)
		require.Equal(t, "best_effort_min_dcs", w[0].Field)
		require.Contains(t, w[0].Message, "has no effect")
	})
	tests := []struct {
		name, spec, field, msg string
	}{
		{"both per-item names", "retry_budget_per_item: 2\nretry_budget_per_workflow: 2\n", "retry_budget_per_workflow", "set one of them"},
		{"a flat field beside the block", "best_effort: {min_groups: 1}\nbest_effort_min_dcs: 2\n", "best_effort_min_dcs", "set min_groups there"},
		{"a negative deadline", "best_effort: true\nbest_effort_deadline_seconds: -1\n", "best_effort_deadline_seconds", "number of seconds >= 0"},
		{"a bad per-workflow budget", "retry_budget_per_workflow: lots\n", "retry_budget_per_workflow", "non-negative integer"},
		{"a bad min_dcs", "best_effort: true\nbest_effort_min_dcs: -2\n", "best_effort_min_dcs", "must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte(ad44Steps + tt.spec))
			ve := validationError(t, err)
			require.Len(t, ve.Problems, 1, "%v", ve)
			require.Equal(t, tt.field, ve.Problems[0].Field)
			require.Contains(t, ve.Problems[0].Message, tt.msg)
			require.NotZero(t, ve.Problems[0].Line)
		})
	}
}

// Problems of Prodigy's layout name the fields where they are written.
func TestProdigyLayoutProblems(t *testing.T) {
	tests := []struct {
		name, spec, field, msg string
		line                   int
	}{
		{"unknown mode", "mode: mapreduse\nmap: {input: i.json, agent_template: [{shell: x}]}\n", "mode", `did you mean "mapreduce"`, 1},
		{"commands in mapreduce mode", "mode: mapreduce\ncommands: [{shell: x}]\nitems: [a]\nagent_template: [{shell: x}]\n", "commands", "only in mode: standard", 2},
		{"map in standard mode", "mode: standard\nmap: {input: i.json}\ncommands: [{shell: x}]\n", "map", "only in mode: mapreduce", 2},
		{"a field twice", "input: a.json\nmap:\n  input: b.json\n  agent_template: [{shell: x}]\n", "map.input", "set it once", 3},
		{"a filter that does not parse", "map:\n  input: a.json\n  filter: \"item.score >=\"\n  agent_template: [{shell: x}]\n", "map.filter", "expected a field, a value", 3},
		{"a sort_by that does not parse", "map:\n  input: a.json\n  sort_by: \"score DOWN\"\n  agent_template: [{shell: x}]\n", "map.sort_by", `unexpected "DOWN"`, 3},
		{"max_items 0", "map:\n  input: a.json\n  max_items: 0\n  agent_template: [{shell: x}]\n", "map.max_items", "must be >= 1", 3},
		{"a bad timeout_config", "map:\n  input: a.json\n  timeout_config: {timeout_policy: sometimes}\n  agent_template: [{shell: x}]\n", "map.timeout_config.timeout_policy", "unknown policy", 3},
		{"a negative integer timeout", "commands:\n  - shell: x\n    timeout: -5\n", "commands[0].timeout", "seconds greater than 0", 3},
		{"a claude step beside shell", "commands:\n  - claude: /fix\n    shell: x\n", "commands[0].claude", "set only one of shell, handler or claude", 2},
		{"a fail_workflow that is not a boolean", "commands:\n  - shell: x\n    on_failure:\n      claude: /fix\n      fail_workflow: yes\n", "commands[0].on_failure.fail_workflow", "expected true or false", 5},
		{"an empty setup", "setup: []\nmap:\n  input: a.json\n  agent_template: [{shell: x}]\n", "setup", "at least one step", 1},
		{"an unknown map field", "map:\n  input: a.json\n  agent_templat: [{shell: x}]\n", "map.agent_templat", `did you mean "agent_template"`, 3},
		{"a step problem inside map", "map:\n  input: a.json\n  agent_template:\n    - shell: x\n      timeout: 5 seconds\n", "map.agent_template[0].timeout", "invalid duration", 5},
		{"a step problem in commands", "commands:\n  - shell: x\n    retry_config: {attempts: 0}\n", "commands[0].retry_config.attempts", "between 1 and", 3},
		{"a step's on_failure in another form", "commands:\n  - shell: x\n    on_failure: continue\n", "commands[0].on_failure", "go in retry_config.on_failure", 3},
		{"a step's on_failure twice", "commands:\n  - shell: x\n    on_failure: {shell: y}\n    retry_config: {on_failure: continue}\n", "commands[0].on_failure", "set once", 3},
		{"a fallback with a bad reference", "commands:\n  - shell: x\n    on_failure:\n      shell: \"fix ${map.results}\"\n", "commands[0].on_failure.shell", "only allowed in reduce", 4},
		{"agent_timeout_secs", "map:\n  input: a.json\n  agent_timeout_secs: -3\n  agent_template: [{shell: x}]\n", "map.agent_timeout_secs", "seconds greater than 0", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte(tt.spec))
			ve := validationError(t, err)
			require.Len(t, ve.Problems, 1, "%v", ve)
			require.Equal(t, tt.field, ve.Problems[0].Field, "%v", ve)
			require.Contains(t, ve.Problems[0].Message, tt.msg)
			require.Equal(t, tt.line, ve.Problems[0].Line, "%v", ve)
		})
	}
}

func TestProdigyLayoutForms(t *testing.T) {
	t.Run("older nested commands and agent_timeout_secs", func(t *testing.T) {
		spec, err := jobspec.Parse([]byte("map:\n  input: a.json\n  agent_timeout_secs: 300\n  agent_template:\n    commands:\n      - shell: x\nreduce:\n  commands:\n    - shell: y\n"))
		require.NoError(t, err)
		require.Equal(t, messages.Duration(5*time.Minute), spec.AgentTimeout)
		require.Equal(t, "x", spec.AgentTemplate[0].Shell)
		require.Equal(t, "y", spec.Reduce[0].Shell)
	})
	t.Run("commands with items run once per item", func(t *testing.T) {
		spec, err := jobspec.Parse([]byte("items: [a, b]\ncommands: [{shell: x}]\n"))
		require.NoError(t, err)
		require.Len(t, spec.Items, 2)
	})
	t.Run("the same spec in both layouts", func(t *testing.T) {
		prodigy, err := jobspec.Parse([]byte("name: n\nmode: mapreduce\nerror_policy: {on_item_failure: dlq}\nmap:\n  input: a.json\n  json_path: \"$.items[*]\"\n  max_parallel: 4\n  agent_template:\n    - shell: x\n      on_failure:\n        shell: y\nreduce: [{shell: z}]\n"))
		require.NoError(t, err)
		own, err := jobspec.Parse([]byte("name: n\nerror_policy: {on_item_failure: dlq}\ninput: a.json\njson_path: \"$.items[*]\"\nmax_parallel: 4\nagent_template:\n  - shell: x\n    retry_config: {attempts: 1, on_failure: {fallback: {command: y}}}\nreduce: [{shell: z, retry_config: {attempts: 1}}]\n"))
		require.NoError(t, err)
		require.Equal(t, own, prodigy)
	})
}

// A field accepted with no effect is a warning, not a problem.
func TestNoEffectWarnings(t *testing.T) {
	tests := []struct {
		name, spec string
		fields     []string
	}{
		{"workflow retry_config under skip", "error_policy: {on_item_failure: skip, retry_config: {max_attempts: 3}}\n", []string{"error_policy.retry_config"}},
		{"jitter_factor without jitter", "agent_template: [{shell: x, retry_config: {jitter_factor: 0.5}}]\n", []string{"agent_template[0].retry_config.jitter_factor"}},
		{"delays with attempts 1", "agent_template: [{shell: x, retry_config: {attempts: 1, max_delay: 5s, retry_on: [network]}}]\n", []string{"agent_template[0].retry_config.max_delay", "agent_template[0].retry_config.retry_on"}},
		{"thresholds that the first failure pre-empts", "error_policy: {continue_on_failure: false, max_failures: 3}\n", []string{"error_policy.max_failures"}},
		{"paths as written", "commands:\n  - shell: x\n    retry_config: {jitter_factor: 0.5}\n", []string{"commands[0].retry_config.jitter_factor"}},
		{"none for dlq with retry_config", "error_policy: {on_item_failure: dlq, retry_config: {max_attempts: 3}}\n", nil},
		{"thresholds one item never reaches", "commands: [{shell: x}]\nerror_policy: {max_failures: 2, failure_threshold: 0.5}\n", []string{"error_policy.failure_threshold", "error_policy.max_failures"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte("items: [a]\n" + tt.spec)
			if !strings.HasPrefix(tt.spec, "agent_template") && !strings.HasPrefix(tt.spec, "commands") {
				data = []byte("items: [a]\nagent_template: [{shell: x}]\n" + tt.spec)
			}
			_, err := jobspec.Parse(data)
			require.NoError(t, err)
			var got []string
			for _, w := range jobspec.Warnings(data) {
				require.Contains(t, w.Message, "no effect")
				got = append(got, w.Field)
			}
			require.Equal(t, tt.fields, got)
		})
	}
}
