package jobspec_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Prodigy's step kinds and handlers (foreach, on_exit_code, nested
// on_success, fail_workflow, on_failure commands) and the step fields it
// has that change nothing in jetfleet, read from the project's own
// fixture.
func TestProdigyStepKinds(t *testing.T) {
	data := readProdigy(t, "step-kinds.yaml")
	spec, err := jobspec.Parse(data)
	require.NoError(t, err)
	steps := spec.AgentTemplate
	require.Len(t, steps, 8)

	require.Equal(t, ":", steps[0].Shell, "analyze: does nothing")

	of := steps[1].RetryConfig.OnFailure
	require.Equal(t, "/tidy '${shell.output}'", of.Fallback, "the step's own capture is its output in its handler")
	require.True(t, of.Claude)
	require.True(t, of.FailWorkflow)
	require.Equal(t, 2, of.MaxAttempts, "max_attempts: the step's runs in one delivery, its handler between")
	require.Equal(t, 1, *steps[1].RetryConfig.Attempts)

	fe := steps[2].Foreach
	require.Equal(t, []string{"alpha", "beta", "gamma"}, fe.Items)
	require.Equal(t, 10, fe.Parallel, "parallel: true is 10, as Prodigy runs it")
	require.Equal(t, "echo ${item} ${index} of ${total}", fe.Do[0].Shell)
	require.Equal(t, 1, *fe.Do[0].RetryConfig.Attempts, "a body command runs once")

	fe = steps[3].Foreach
	require.Equal(t, "ls docs", fe.Command)
	require.Equal(t, 5, fe.MaxItems)
	require.True(t, fe.ContinueOnError)
	require.Equal(t, "/summarise docs/${item}", fe.Do[1].Claude)

	require.Equal(t, map[string]messages.Step{"0": {Shell: "echo done"}, "3": {Claude: "/explain '${shell.output}'"}}, steps[4].OnExitCode)

	require.Equal(t, "set -e\nmake build\nmake test", steps[5].OnSuccess)
	require.Equal(t, "/write-spec --files specs/*.md", steps[6].Claude)
	require.Equal(t, "set -e\nrollback\nnotify", steps[7].RetryConfig.OnFailure.Fallback)

	warned := map[string]string{}
	for _, w := range jobspec.Warnings(data) {
		warned[w.Field] = w.Message
	}
	for _, f := range []string{"[0].analyze", "[1].description", "[5].on_success.on_success.on_failure", "[6].outputs",
		"[6].analysis", "[6].options", "[6].args", "[6].validate", "[7].on_failure.strategy"} {
		require.Contains(t, warned[f], "no effect", f)
	}
	require.Contains(t, warned["[6].claude"], "the pattern itself")
	require.Contains(t, warned["[6].validate"], "succeeds or fails by its own command")

	// The round trip through the wire form keeps all of it.
	js, err := jobspec.ToJSON(data)
	require.NoError(t, err)
	again, err := jobspec.Parse(js)
	require.NoError(t, err)
	require.Equal(t, spec.AgentTemplate, again.AgentTemplate)
}

func TestProdigyStepKindProblems(t *testing.T) {
	bad := func(yaml string) string {
		t.Helper()
		_, err := jobspec.Parse([]byte(yaml))
		require.Error(t, err)
		var out []string
		for _, p := range validationError(t, err).Problems {
			out = append(out, p.Error())
		}
		return strings.Join(out, "\n")
	}
	cases := []struct{ name, yaml, want string }{
		{"foreach without elements", "- foreach: {do: [{shell: x}]}\n", "[0].foreach (line 1): needs items"},
		{"foreach without a body", "- foreach: {foreach: [a]}\n", "[0].foreach.do"},
		{"a handler in a body", "- foreach: {foreach: [a], do: [{handler: noop}]}\n", "[0].foreach.do[0].handler (line 1): not yet in a foreach body"},
		{"a capture in a body", "- foreach: {foreach: [a], do: [{shell: x, capture: y}]}\n", "[0].foreach.do[0].capture (line 1): not yet in a foreach body"},
		{"parallel out of bounds", "- foreach: {foreach: [a], parallel: 1000, do: [{shell: x}]}\n", "[0].foreach.parallel (line 1): must be 0 to 100"},
		{"an unknown variable in a body", "- foreach: {foreach: [a], do: [{shell: \"echo ${nope}\"}]}\n", `unknown reference "nope"`},
		{"index outside a body", "- shell: echo ${index}\n", `unknown reference "index"`},
		{"not an exit code", "- shell: x\n  on_exit_code: {\"-1\": {shell: y}}\n", "[0].on_exit_code.-1 (line 2): expected an exit code, 0 to 255"},
		{"on_exit_code on a write_file", "- write_file: {path: a, content: b}\n  on_exit_code: {0: {shell: y}}\n", "[0].on_exit_code (line 2): only on shell and claude steps"},
		{"an exit-code handler with a handler", "- shell: x\n  on_exit_code: {1: {handler: noop}}\n", "not yet: an exit-code handler is a shell or claude command"},
		{"an unsafe foreach command", "- foreach: {foreach: \"ls $(( ${item.n} + 1 ))\", do: [{shell: x}]}\n", "[0].foreach.foreach"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := bad(c.yaml)
			require.Contains(t, got, c.want)
		})
	}
	// Integer keys are exit codes only under on_exit_code.
	require.Contains(t, bad("- shell: x\n  with: {1: a}\n"), "mapping key 1 is a !!int")
}

// A top-level merge block (Prodigy's worktree merge) is accepted with a
// warning: its steps do not run.
func TestProdigyMergeBlock(t *testing.T) {
	data := []byte("commands:\n  - shell: make\nmerge:\n  - shell: git merge\n")
	_, err := jobspec.Parse(data)
	require.NoError(t, err)
	w := jobspec.Warnings(data)
	require.Len(t, w, 1)
	require.Equal(t, "merge", w[0].Field)
	require.Contains(t, w[0].Message, "these steps do not run")
	// In jetfleet's layout it is an unknown field.
	_, err = jobspec.Parse([]byte("items: [a]\nagent_template: [{shell: x}]\nmerge: [{shell: y}]\n"))
	require.ErrorContains(t, err, "merge")
}
