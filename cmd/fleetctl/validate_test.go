package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// runValidateCLI runs `fleetctl validate args...` in-process.
func runValidateCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code = runCLI(context.Background(), env, append([]string{"validate"}, args...))
	return code, out.String(), errb.String()
}

// writeValidateFiles writes name → content into a temp dir and returns it.
func writeValidateFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	return dir
}

func TestValidateBadExample(t *testing.T) {
	t.Parallel()
	code, out, errOut := runValidateCLI(t, "../../examples/validate-bad.yaml")
	require.Equal(t, exitUsage, code)
	require.Equal(t, `id (line 7): invalid character ' ' at offset 7 (allowed: letters, digits, '-', '_')
items[2] (line 12): duplicate item id "img-1" (same as items[0])
agent_template[0].timeout (line 15): invalid duration "30 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")
agent_template[0].retry_config.backoff.exponential.base (line 18): must be >= 1, got 0.5
agent_template[0].retry_config.jitter_factor (line 19): must be between 0 and 1, got 1.3
agent_template[0].retry_config.retry_on[2].pattern (line 20): invalid regex: missing closing )
agent_template[1].retyr_config (line 22): unknown field (did you mean "retry_config"?)
error_policy.error_collection (line 25): batched needs a size: {batched: {size: N}}
error_policy.failure_threshold (line 26): must be greater than 0 and at most 1 (a failure rate), got 25
retry_budget (line 27): percentage must be between 0% and 100%, got 150%
`, out)
	require.Equal(t, "fleetctl validate: ../../examples/validate-bad.yaml: 10 problems\n", errOut)
}

func TestValidateJSONOutput(t *testing.T) {
	t.Parallel()
	dir := writeValidateFiles(t, map[string]string{
		"good.yaml": "items: [{id: a, dc: eu}, {id: b, dc: us}, {id: c, dc: eu}]\ngroup_by: ${item.dc}\nagent_template: [{shell: x}, {handler: h}]\n",
		"bad.json":  "{\n  \"items\": [1],\n  \"agent_template\": [{\"shell\": \"x\", \"timeout\": \"5\"}],\n  \"max_parallel\": -2\n}\n",
	})

	code, out, _ := runValidateCLI(t, "--json", filepath.Join(dir, "good.yaml"))
	require.Equal(t, exitOK, code)
	require.JSONEq(t, `{"valid": true, "problems": [], "items": 3, "steps": 2, "groups": 2}`, out)

	// Flags may follow the file.
	code, out, _ = runValidateCLI(t, filepath.Join(dir, "bad.json"), "--json")
	require.Equal(t, exitUsage, code)
	require.JSONEq(t, `{"valid": false, "items": 0, "steps": 0, "problems": [
		{"field": "agent_template[0].timeout", "line": 3, "message": "invalid duration \"5\": missing unit after \"5\" (use ns, us, ms, s, m, h, d or w, e.g. \"30s\")"},
		{"field": "max_parallel", "line": 4, "message": "must be >= 0 (0 = no cap), got -2"}
	]}`, out)

	var rep struct {
		Valid    bool
		Problems []messages.FieldError
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Problems, 2)
}

func TestValidateInputFile(t *testing.T) {
	t.Parallel()
	dir := writeValidateFiles(t, map[string]string{
		"items.json":     `{"items": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}]}`,
		"dup-items.json": `[{"id": "a"}, {"id": "a"}]`,
		"ok.yaml":        "input: items.json\njson_path: $.items[*]\nagent_template: [{shell: x}]\n",
		"missing.yaml":   "input: nope.json\nagent_template: [{shell: x}]\n",
		"badpath.yaml":   "input: items.json\njson_path: $.things[*]\nagent_template: [{shell: x}]\n",
		"dup.yaml":       "input: dup-items.json\nagent_template: [{shell: x}]\n",
		"remote.yaml":    "input: objstore://fleet_inputs/items.json\nagent_template: [{shell: x}]\n",
		"group.yaml":     "items: [{id: a, dc: eu}, {id: b}]\ngroup_by: ${item.dc}\nagent_template: [{shell: x}]\n",
	})
	tests := []struct {
		file, wantOut string
		wantCode      int
	}{
		{"ok.yaml", "ok.yaml: valid (4 items, 1 step)\n", exitOK},
		{"remote.yaml", "remote.yaml: valid (items in the object store, 1 step)\n", exitOK},
		{"missing.yaml", "input: ", exitUsage},
		{"badpath.yaml", "json_path: ", exitUsage},
		{"dup.yaml", "input: ", exitUsage},
		{"group.yaml", "items[1]: ", exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			code, out, _ := runValidateCLI(t, filepath.Join(dir, tt.file))
			require.Equal(t, tt.wantCode, code, out)
			out = strings.ReplaceAll(out, dir+string(filepath.Separator), "")
			require.True(t, strings.HasPrefix(out, tt.wantOut), "output %q, want prefix %q", out, tt.wantOut)
			if tt.wantCode != exitOK {
				require.Equal(t, 1, strings.Count(out, "\n"), out)
			}
		})
	}
	_, out, _ := runValidateCLI(t, filepath.Join(dir, "dup.yaml"))
	require.Contains(t, out, `duplicate item id "a"`)
	_, out, _ = runValidateCLI(t, filepath.Join(dir, "missing.yaml"))
	require.Contains(t, out, "no such file")
}

func TestValidateUsageAndUnreadable(t *testing.T) {
	t.Parallel()
	code, _, errOut := runValidateCLI(t)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "usage: fleetctl validate FILE [--json]")

	code, _, _ = runValidateCLI(t, "a.yaml", "b.yaml")
	require.Equal(t, exitUsage, code)

	code, _, _ = runValidateCLI(t, "--bogus", "a.yaml")
	require.Equal(t, exitUsage, code)

	code, _, _ = runValidateCLI(t, "-h")
	require.Equal(t, exitOK, code)

	missing := filepath.Join(t.TempDir(), "nope.yaml")
	code, out, errOut := runValidateCLI(t, missing)
	require.Equal(t, exitUsage, code)
	require.Contains(t, out, "cannot read file")
	require.Contains(t, out, "no such file or directory")
	require.Contains(t, errOut, "1 problem\n")

	code, out, _ = runValidateCLI(t, "--json", missing)
	require.Equal(t, exitUsage, code)
	var rep validateReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.False(t, rep.Valid)
	require.Len(t, rep.Problems, 1)
	require.Empty(t, rep.Problems[0].Field)
}

// TestValidateExamples: every example job in examples/ is valid, except
// the one that shows what validate reports.
func TestValidateExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		if filepath.Base(f) == "validate-bad.yaml" {
			continue
		}
		code, out, errOut := runValidateCLI(t, f)
		require.Equal(t, exitOK, code, "%s: %s%s", f, out, errOut)
	}
}

// TestValidateShellPositions: a reference bash would evaluate is reported
// with the step's field path and line, and the message's suggestion is
// itself valid.
func TestValidateShellPositions(t *testing.T) {
	t.Parallel()
	dir := writeValidateFiles(t, map[string]string{
		"arith.yaml": "items: [{id: a, size: 10}]\nagent_template:\n  - shell: echo start\n  - shell: 'if (( ${item.size} > 5 )); then resize ${item.id}; fi'\n",
		"fixed.yaml": "items: [{id: a, size: 10}]\nagent_template:\n  - shell: echo start\n" +
			"  - shell: |\n      n=$(printf '%s\\n' ${item.size} | grep -xE -- '-?[0-9]+') || exit 1\n      if [ \"$n\" -gt 5 ]; then resize -- ${item.id}; fi\n",
	})
	code, out, _ := runValidateCLI(t, filepath.Join(dir, "arith.yaml"))
	require.Equal(t, exitUsage, code)
	require.Equal(t, "agent_template[1].shell (line 4): ${item.size}: cannot be quoted safely: bash evaluates it as arithmetic in ((...)), "+
		"which runs any $(...) in a value such as a[$(cmd)] whatever the quoting; check that it is a number and use the checked copy: "+
		"n=$(printf '%s\\n' ${item.size} | grep -xE -- '-?[0-9]+') || exit 1\n", out)

	code, out, _ = runValidateCLI(t, filepath.Join(dir, "fixed.yaml"))
	require.Equal(t, exitOK, code, out)
}

// A spec whose initial_delay is above max_delay is valid (every delay is
// capped at max_delay); validate warns, in text and in JSON.
func TestValidateWarnsOfACappedInitialDelay(t *testing.T) {
	t.Parallel()
	dir := writeValidateFiles(t, map[string]string{
		"capped.yaml": "items: [1]\nagent_template:\n  - shell: x\n    retry_config: {initial_delay: 1m}\n",
	})
	path := filepath.Join(dir, "capped.yaml")
	code, out, _ := runValidateCLI(t, path)
	require.Equal(t, exitOK, code)
	require.Equal(t, "warning: agent_template[0].retry_config.initial_delay (line 4): 1m is greater than max_delay 30s (default): every delay is capped at 30s\n"+
		path+": valid (1 item, 1 step)\n", out)
	code, out, _ = runValidateCLI(t, "--json", path)
	require.Equal(t, exitOK, code)
	require.JSONEq(t, `{"valid": true, "problems": [], "items": 1, "steps": 1, "warnings": [
		{"field": "agent_template[0].retry_config.initial_delay", "line": 4, "message": "1m is greater than max_delay 30s (default): every delay is capped at 30s"}]}`, out)
}

// The source documents' job examples (pkg/jobspec/testdata/seeds) through
// `fleetctl validate`, as a Prodigy user pastes them: the jobs are valid,
// with the items of the input files they name counted; the claude
// fallback of 001's example is refused by field; --explain says what Prodigy's layout means.
func TestValidateSeedExamples(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "pkg", "jobspec", "testdata", "seeds")
	for _, name := range []string{
		"002-integration.yaml", "003-command-level-configuration.yaml", "003-command-level-example.yaml",
		"003-workflow-level-configuration.yaml", "003-using-both-systems.yaml", "003-example-1-standard.yaml",
		"003-example-2-simple-mapreduce.yaml", "003-example-3-robust-mapreduce.yaml",
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runValidateCLI(t, filepath.Join(dir, name))
			require.Equal(t, exitOK, code, "%s%s", out, errOut)
			require.Contains(t, out, ": valid (")
			require.NotContains(t, out, "warning:")
		})
	}

	// A map: block with its steps only (002's strategies, 003's scope
	// example) validates as a template of steps, with a warning.
	for _, name := range []string{
		"002-fixed.yaml", "002-linear.yaml", "002-exponential-default.yaml", "002-exponential-base.yaml",
		"002-fibonacci.yaml", "002-custom.yaml", "003-scope-workflow-level.yaml",
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runValidateCLI(t, filepath.Join(dir, name))
			require.Equal(t, exitOK, code, "%s%s", out, errOut)
			require.Contains(t, out, "warning: map.input (line 1): no items and no input: valid as a template of steps")
			require.Contains(t, out, ": valid (a template: no items)")
		})
	}
	// A template with another problem is refused, the missing items named too.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("map:\n  agent_template:\n    - shell: x\n      timeout: soon\n"), 0o600))
	code, out, _ := runValidateCLI(t, bad)
	require.Equal(t, exitUsage, code)
	require.Contains(t, out, "map.input (line 1): required")
	require.Contains(t, out, `map.agent_template[0].timeout (line 4): invalid duration "soon"`)

	code, out, _ = runValidateCLI(t, filepath.Join(dir, "001-mapreduce-integration.yaml"))
	require.Equal(t, exitOK, code, "a claude step and a claude on_failure handler are accepted: %s", out)

	code, out, errOut := runValidateCLI(t, "--explain", filepath.Join(dir, "003-example-1-standard.yaml"))
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `note: commands (line 3): are agent_template, run in order as one item (id "standard")`)
	require.Contains(t, out, "agent_template:\n  - name: step-1\n    shell: fetch-data.sh\n")
	require.Contains(t, out, "        fallback:\n          command: save-to-local.sh\n")
	require.Contains(t, out, "valid (1 item, 3 steps)")

	code, out, _ = runValidateCLI(t, "--explain", "--json", filepath.Join(dir, "003-workflow-level-configuration.yaml"))
	require.Equal(t, exitOK, code)
	var rep validateReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.EqualValues(t, 3, rep.Items)
	require.Equal(t, "items.json", rep.Spec.Input)
	require.Equal(t, 3, *rep.Spec.ErrorPolicy.RetryConfig.MaxAttempts)
	require.NotEmpty(t, rep.Notes)
}
