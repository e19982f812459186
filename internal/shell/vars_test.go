package shell

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// Prodigy's variables: ${item_total}, the map results' JSON and the
// success rate, a bare ${NAME} of the job's env, defaults and |length.
func TestExpandProdigyVariables(t *testing.T) {
	t.Parallel()
	results := filepath.Join(t.TempDir(), "map-results.json")
	require.NoError(t, os.WriteFile(results, []byte(`[{"item_id":"a","output":"it's ok"},{"item_id":"b","output":"2"}]`+"\n"), 0o600))
	vars := Vars{
		Item: json.RawMessage(`{"x":1}`), ItemIndex: 3, ItemTotal: 12,
		Map: &MapVars{Results: results, Successful: 2, Failed: 1, Total: 3},
		LookupJobEnv: func(name string) (string, bool) {
			v, ok := map[string]string{"PROJECT": "demo app"}[name]
			return v, ok
		},
		Captures: map[string]*wire.Capture{"list": {Value: json.RawMessage(`["a","b","c"]`)}},
	}
	tests := []struct{ template, want string }{
		{"echo ${item_index} of ${item_total}", "echo '3' of '12'"},
		{"echo $(( ${item_total} + 1 ))", "echo $(( 12 + 1 ))"},
		{"echo '${map.results}'", "echo '" + results + "'"},
		{"echo ${map.results_file}", "echo '" + results + "'"},
		{"echo '${map.results_json}'", `echo '[{"item_id":"a","output":"it'\''s ok"},{"item_id":"b","output":"2"}]'`},
		{"echo ${map.results_json[0].output} ${map.results[1].item_id}", `echo 'it'\''s ok' 'b'`},
		{"echo ${map.success_rate}", "echo '66.67'"},
		{"echo ${PROJECT}", "echo 'demo app'"},
		{"echo ${missing:-none} ${build.success|default:false} ${env.CI:-local}", "echo 'none' 'false' 'local'"},
		{"echo ${list|length} ${PROJECT|length} ${PROJECT|length:3}", "echo '3' '8' '3'"},
	}
	for _, tt := range tests {
		got, err := Expand(mustParse(t, tt.template), vars)
		require.NoError(t, err, tt.template)
		require.Equal(t, tt.want, got, tt.template)
	}
	_, err := Expand(mustParse(t, "echo ${map.results_json[5].output}"), vars)
	require.ErrorIs(t, err, ErrItemField)
	require.ErrorContains(t, err, `map.results: index "5" out of range`)
}

// ${map.results_json} (Prodigy's ${map.results}) over the bound is an
// error naming the file to read instead; a path into the results reads
// further.
func TestExpandMapResultsBound(t *testing.T) {
	t.Parallel()
	results := filepath.Join(t.TempDir(), "map-results.json")
	big := `[{"output":"` + strings.Repeat("x", MaxMapResultsJSON) + `"},{"output":"last"}]`
	require.NoError(t, os.WriteFile(results, []byte(big), 0o600))
	vars := Vars{Map: &MapVars{Results: results, Total: 2}}
	_, err := Expand(mustParse(t, "echo ${map.results_json}"), vars)
	require.ErrorIs(t, err, ErrMapResultsSize)
	require.ErrorContains(t, err, "the map results' JSON is over 102400 bytes, more than a command can hold: read the file instead, ${map.results_file} or $MAP_RESULTS")
	got, err := Expand(mustParse(t, "echo ${map.results_json[1].output}"), vars)
	require.NoError(t, err)
	require.Equal(t, "echo 'last'", got)
	_, err = Expand(mustParse(t, "echo ${map.results_json}"), Vars{Map: &MapVars{Results: filepath.Join(t.TempDir(), "none")}})
	require.ErrorIs(t, err, ErrNoMap)
}
