package jobspec_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// seedOutcome is what becomes of a source document's job example.
type seedOutcome int

const (
	// seedValid: it validates as written.
	seedValid seedOutcome = iota
	// seedNoInput: a map: block with its steps only, no input; refused for
	// that only (map.input), as Prodigy refuses it.
	seedNoInput
)

// Every job example of the source documents (testdata/seeds, README.md
// there says which is which), pasted as written.
var seedExamples = map[string]seedOutcome{
	"001-mapreduce-integration.yaml":        seedValid,
	"002-fixed.yaml":                        seedNoInput,
	"002-linear.yaml":                       seedNoInput,
	"002-exponential-default.yaml":          seedNoInput,
	"002-exponential-base.yaml":             seedNoInput,
	"002-fibonacci.yaml":                    seedNoInput,
	"002-custom.yaml":                       seedNoInput,
	"002-integration.yaml":                  seedValid,
	"003-command-level-configuration.yaml":  seedValid,
	"003-command-level-example.yaml":        seedValid,
	"003-workflow-level-configuration.yaml": seedValid,
	"003-using-both-systems.yaml":           seedValid,
	"003-scope-workflow-level.yaml":         seedNoInput,
	"003-example-1-standard.yaml":           seedValid,
	"003-example-2-simple-mapreduce.yaml":   seedValid,
	"003-example-3-robust-mapreduce.yaml":   seedValid,
}

func readSeed(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "seeds", name))
	require.NoError(t, err)
	return data
}

func TestSeedExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "seeds", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, len(seedExamples), "every fixture has an expected outcome")
	for name, want := range seedExamples {
		t.Run(name, func(t *testing.T) {
			data := readSeed(t, name)
			spec, err := jobspec.Parse(data)
			switch want {
			case seedValid:
				require.NoError(t, err)
				require.NoError(t, jobspec.Validate(spec))
				_, notes, err := jobspec.Explain(data)
				require.NoError(t, err)
				require.NotEmpty(t, notes, "Prodigy's layout is explained")
			case seedNoInput:
				ve := validationError(t, err)
				require.Len(t, ve.Problems, 1, "%v", ve)
				require.Equal(t, "map.input", ve.Problems[0].Field)
				require.Contains(t, ve.Problems[0].Message, "required")
				// With an input, the example is a job.
				_, err := jobspec.Parse([]byte(strings.Replace(string(data), "map:\n", "map:\n  input: items.json\n", 1)))
				require.NoError(t, err)
			}
		})
	}
}

func validationError(t *testing.T, err error) *messages.ValidationError {
	t.Helper()
	require.ErrorIs(t, err, messages.ErrInvalidSpec)
	ve, ok := err.(*messages.ValidationError)
	require.True(t, ok, "%T", err)
	require.NotEmpty(t, ve.Problems)
	return ve
}

// What 003's examples mean in jetfleet's terms.
func TestSeedExamplesMeaning(t *testing.T) {
	t.Run("003 workflow-level configuration", func(t *testing.T) {
		spec, err := jobspec.Parse(readSeed(t, "003-workflow-level-configuration.yaml"))
		require.NoError(t, err)
		require.Equal(t, "mapreduce-workflow", spec.Name)
		require.Equal(t, "items.json", spec.Input)
		require.Equal(t, "$.items[*]", spec.JSONPath)
		require.Equal(t, "process ${item.id}", spec.AgentTemplate[0].Shell)
		ep := spec.ErrorPolicy
		require.Equal(t, messages.ItemFailureDLQ, ep.OnItemFailure.Action)
		require.Equal(t, 3, *ep.RetryConfig.MaxAttempts)
		require.Equal(t, messages.BackoffExponential, ep.RetryConfig.Backoff.Kind)
		require.Equal(t, 0.25, *ep.FailureThreshold)
		require.Equal(t, 5, ep.CircuitBreaker.FailureThreshold)
		require.Empty(t, jobspec.Warnings(readSeed(t, "003-workflow-level-configuration.yaml")), "every field has an effect")
	})
	t.Run("003 example 1: standard mode", func(t *testing.T) {
		spec, err := jobspec.Parse(readSeed(t, "003-example-1-standard.yaml"))
		require.NoError(t, err)
		require.Len(t, spec.Items, 1)
		require.JSONEq(t, `{"id":"standard"}`, string(spec.Items[0]))
		require.Len(t, spec.AgentTemplate, 3)
		require.Equal(t, messages.OnFailureContinue, spec.AgentTemplate[1].RetryConfig.OnFailure.Action)
		require.Equal(t, messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "save-to-local.sh"}, *spec.AgentTemplate[2].RetryConfig.OnFailure)
	})
	t.Run("003 example 3: reduce", func(t *testing.T) {
		spec, err := jobspec.Parse(readSeed(t, "003-example-3-robust-mapreduce.yaml"))
		require.NoError(t, err)
		require.Equal(t, 10, spec.MaxParallel)
		require.Equal(t, "aggregate ${map.results_json}", spec.Reduce[0].Shell, "Prodigy's ${map.results} is the JSON")
	})
	t.Run("001: error_policy inside map", func(t *testing.T) {
		data := strings.NewReplacer(`- claude: "/process-item '${item.id}'"`, `- shell: "process-item ${item.id}"`,
			"on_failure:\n        claude: \"/fix-validation-error\"", "on_failure:\n        shell: \"fix-validation-error\"").Replace(string(readSeed(t, "001-mapreduce-integration.yaml")))
		spec, err := jobspec.Parse([]byte(data))
		require.NoError(t, err)
		rc := spec.ErrorPolicy.RetryConfig
		require.Equal(t, 5, *rc.MaxAttempts)
		require.Equal(t, messages.BackoffFibonacci, rc.Backoff.Kind)
		require.True(t, rc.Jitter)
		require.Equal(t, messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "fix-validation-error"}, *spec.AgentTemplate[1].RetryConfig.OnFailure)
	})
}
