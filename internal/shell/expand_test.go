package shell

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// payloads are item values that must reach the command as one literal
// argument, byte for byte.
var payloads = []string{
	"",
	" ",
	"plain",
	"two words",
	"'; rm -rf / #",
	"$(touch PWNED)",
	"`touch PWNED`",
	"\"; touch PWNED; echo \"",
	`'"'"'`,
	"line one\nline two",
	"trailing newline\n",
	"$HOME",
	"${HOME}",
	"$'\\x41'",
	"héllo wörld ✓ 日本語 🙂",
	"*",
	"~",
	"-n",
	"--",
	`\`,
	`\'`,
	`a\"b`,
	"a\tb\r",
	"#not a comment",
	"!x",
	"; touch PWNED",
	"| touch PWNED",
	"&& touch PWNED",
	"> PWNED",
	"EOF",
	"\nEOF\ntouch PWNED\n",
	")",
	"}",
}

func mustParse(t testing.TB, s string) messages.Template {
	t.Helper()
	tpl, err := messages.ParseTemplate(s)
	require.NoError(t, err)
	return tpl
}

func itemWith(t testing.TB, fields map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(fields)
	require.NoError(t, err)
	return b
}

// runScript runs script with /bin/sh in a fresh directory, returns its
// stdout, and fails if anything created a file there.
func runScript(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(shellPath, "-c", script)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "script %q: stderr %q", script, stderr.String())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "script %q created files", script)
	return string(out)
}

// TestExpandInjection expands every payload at every kind of position and
// runs the result: each must arrive as exactly one literal argument (or
// the literal part of one), and nothing else may run.
func TestExpandInjection(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name     string
		template string
		want     func(v string) string
	}{
		{"bare word", `printf '[%s]' ${item.x}`, func(v string) string { return "[" + v + "]" }},
		{"argument count", `set -- ${item.x}; printf '%d' $#`, func(string) string { return "1" }},
		{"double quoted", `printf '[%s]' "${item.x}"`, func(v string) string { return "[" + v + "]" }},
		{"inside double quotes", `printf '[%s]' "pre ${item.x} post"`, func(v string) string { return "[pre " + v + " post]" }},
		{"inside single quotes", `printf '[%s]' 'pre ${item.x} post'`, func(v string) string { return "[pre " + v + " post]" }},
		{"part of a word", `printf '[%s]' pre${item.x}post`, func(v string) string { return "[pre" + v + "post]" }},
		{"twice in a word", `printf '[%s]' ${item.x}"-"${item.x}`, func(v string) string { return "[" + v + "-" + v + "]" }},
		{"after an escaped backslash", `printf '[%s]' a\\${item.x}`, func(v string) string { return `[a\` + v + "]" }},
		{"after a mid-word hash", `printf '[%s]' a#${item.x}`, func(v string) string { return "[a#" + v + "]" }},
		{"after $#", `printf '[%s]' $#${item.x}`, func(v string) string { return "[0" + v + "]" }},
		{"assignment", `x=${item.x}; printf '[%s]' "$x"`, func(v string) string { return "[" + v + "]" }},
		{"command substitution", `printf '[%s]' "$(printf '%s.' ${item.x})"`, func(v string) string { return "[" + v + ".]" }},
		{"quoted in command substitution", `printf '[%s]' "$(printf '%s.' "${item.x}")"`, func(v string) string { return "[" + v + ".]" }},
		{"after a comment line", "# a comment ${item.x}\nprintf '[%s]' ${item.x}", func(v string) string { return "[" + v + "]" }},
		{"with a trailing comment", `printf '[%s]' ${item.x} # and ${item.x}`, func(v string) string { return "[" + v + "]" }},
		{"after a here-document", "cat <<EOF\nbody\nEOF\nprintf '[%s]' ${item.x}", func(v string) string { return "body\n[" + v + "]" }},
		{"on a here-document's command line", "cat <<'EOF'; printf '[%s]' ${item.x}\n$body\nEOF", func(v string) string { return "$body\n[" + v + "]" }},
		{"after an arithmetic expansion", `printf '[%s]' $((1+2))${item.x}`, func(v string) string { return "[3" + v + "]" }},
		{"after a parameter expansion", `printf '[%s]' $${UNSET_SHELL_TEST_VAR:-d}${item.x}`, func(v string) string { return "[d" + v + "]" }},
		{"after backquotes", "printf '[%s]' `echo q`${item.x}", func(v string) string { return "[q" + v + "]" }},
		{"after a top-level case", "case a in a) printf '[%s]' ${item.x};; esac", func(v string) string { return "[" + v + "]" }},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			tpl := mustParse(t, sh.template)
			require.NoError(t, Validate(tpl))
			// One shell run per shape: every payload in sequence.
			var script, want strings.Builder
			for _, p := range payloads {
				got, err := Expand(tpl, Vars{Item: itemWith(t, map[string]any{"x": p})})
				require.NoError(t, err, "payload %q", p)
				script.WriteString(got + "\nprintf '\\n'\n")
				want.WriteString(sh.want(p) + "\n")
			}
			require.Equal(t, want.String(), runScript(t, script.String()))
		})
	}
}

func TestExpandValues(t *testing.T) {
	t.Parallel()
	item := json.RawMessage(`{"id":"it-1","a":{"b":[10,{"c":"deep"}]},"n":3.50,"t":true,"z":null,"o":{"k":"v"},"arr":[1,"two"]}`)
	vars := Vars{
		Item:      item,
		ItemID:    "it-1",
		JobID:     "job-7",
		Attempt:   2,
		LookupEnv: func(name string) (string, bool) { v, ok := map[string]string{"REGION": "eu west"}[name]; return v, ok },
		Map:       &MapVars{Results: "/data/results dir", Successful: 9, Failed: 1, Total: 10},
	}
	tests := []struct {
		name     string
		template string
		vars     Vars
		want     string
	}{
		{name: "no references", template: "echo hi", vars: vars, want: "echo hi"},
		{name: "escaped dollar brace", template: "echo $${HOME}", vars: vars, want: "echo ${HOME}"},
		{name: "string field", template: "echo ${item.id}", vars: vars, want: "echo 'it-1'"},
		{name: "nested field and index", template: "echo ${item.a.b.1.c}", vars: vars, want: "echo 'deep'"},
		{name: "number in an array", template: "echo ${item.a.b.0}", vars: vars, want: "echo '10'"},
		{name: "number as written", template: "echo ${item.n}", vars: vars, want: "echo '3.50'"},
		{name: "bool", template: "echo ${item.t}", vars: vars, want: "echo 'true'"},
		{name: "null", template: "echo ${item.z}", vars: vars, want: "echo 'null'"},
		{name: "object", template: "echo ${item.o}", vars: vars, want: `echo '{"k":"v"}'`},
		{name: "array", template: "echo ${item.arr}", vars: vars, want: `echo '[1,"two"]'`},
		{name: "whole object item", template: "echo ${item}", vars: Vars{Item: json.RawMessage(`{"k": "it's"}`)}, want: `echo '{"k":"it'\''s"}'`},
		{name: "whole string item", template: "echo ${item}", vars: Vars{Item: json.RawMessage(`"a b"`)}, want: "echo 'a b'"},
		{name: "whole number item", template: "echo ${item}", vars: Vars{Item: json.RawMessage(`42`)}, want: "echo '42'"},
		{name: "ids and attempt", template: "echo ${item_id} ${job_id} ${attempt}", vars: vars, want: "echo 'it-1' 'job-7' '2'"},
		{name: "empty id", template: "echo ${item_id}", vars: Vars{}, want: "echo ''"},
		{name: "env", template: "echo ${env.REGION}", vars: vars, want: "echo 'eu west'"},
		{name: "map values", template: "agg ${map.results} ${map.successful} ${map.failed} ${map.total}", vars: vars, want: "agg '/data/results dir' '9' '1' '10'"},
		{name: "spaces inside braces", template: "echo ${ item.id }", vars: vars, want: "echo 'it-1'"},
		{name: "in double quotes", template: `echo "${item.o}"`, vars: vars, want: `echo "{\"k\":\"v\"}"`},
		{name: "in single quotes", template: `echo 'x${item.o}'`, vars: vars, want: `echo 'x{"k":"v"}'`},
		{name: "in a comment, unresolved", template: "echo hi # ${item.missing}", vars: vars, want: "echo hi # ${item.missing}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Expand(mustParse(t, tt.template), tt.vars)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestExpandOSEnv(t *testing.T) {
	t.Setenv("JETFLEET_SHELL_TEST", "from the agent")
	got, err := Expand(mustParse(t, "echo ${env.JETFLEET_SHELL_TEST}"), Vars{})
	require.NoError(t, err)
	require.Equal(t, "echo 'from the agent'", got)
}

func TestExpandErrors(t *testing.T) {
	t.Parallel()
	item := json.RawMessage(`{"a":{"b":[1,2]},"s":"x","nul":"a\u0000b"}`)
	tests := []struct {
		name     string
		template string
		item     json.RawMessage
		wantErr  error
		wantMsg  string // the full error text, when set
		contains string
	}{
		{name: "missing field", template: "convert ${item.path} out.png", item: item, wantErr: ErrItemField, wantMsg: `${item.path}: item has no field "path"`},
		{name: "missing nested field", template: "echo ${item.a.c}", item: item, wantErr: ErrItemField, wantMsg: `${item.a.c}: item has no field "a.c"`},
		{name: "index out of range", template: "echo ${item.a.b.5}", item: item, wantErr: ErrItemField, contains: `${item.a.b.5}: item.a.b: index "5" out of range (len 2)`},
		{name: "field of a scalar", template: "echo ${item.s.t}", item: item, wantErr: ErrItemField, contains: `${item.s.t}: item has no field "s.t"`},
		{name: "invalid item JSON", template: "echo ${item.s}", item: json.RawMessage(`{"s":`), wantErr: ErrItemField, contains: "${item.s}: item is not valid JSON"},
		{name: "no item", template: "echo ${item}", item: nil, wantErr: ErrItemField, contains: "${item}: item is not valid JSON"},
		{name: "NUL byte", template: "echo ${item.nul}", item: item, wantErr: ErrNUL, wantMsg: "${item.nul}: value contains a NUL byte"},
		{name: "unset env", template: "echo ${env.JETFLEET_SURELY_UNSET}", item: item, wantErr: ErrEnvUnset, wantMsg: "${env.JETFLEET_SURELY_UNSET}: environment variable JETFLEET_SURELY_UNSET is not set"},
		{name: "map outside reduce", template: "agg ${map.results}", item: item, wantErr: ErrNoMap, wantMsg: "${map.results}: map values are only available in reduce steps"},
		{name: "every bad reference", template: "cp ${item.x} ${item.s} ${item.y}", item: item, wantErr: ErrItemField,
			wantMsg: "${item.x}: item has no field \"x\"\n${item.y}: item has no field \"y\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Expand(mustParse(t, tt.template), Vars{Item: tt.item})
			require.ErrorIs(t, err, tt.wantErr)
			require.Empty(t, got)
			var re *RefError
			require.ErrorAs(t, err, &re)
			if tt.wantMsg != "" {
				require.Equal(t, tt.wantMsg, err.Error())
			}
			require.Contains(t, err.Error(), tt.contains)
		})
	}
}

func TestExpandUnsafePositions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		template string
		contains string
	}{
		{name: "backquotes", template: "echo `basename ${item.x}`", contains: "use $(...) instead"},
		{name: "backquotes in double quotes", template: "echo \"`basename ${item.x}`\"", contains: "inside `...`"},
		{name: "command substitution in backquotes", template: "echo `echo $(echo ${item.x})`", contains: "inside `...`"},
		{name: "here-document", template: "cat <<EOF\n${item.x}\nEOF", contains: "here-document"},
		{name: "quoted here-document", template: "cat <<'EOF'\nsafe\n${item.x}\nEOF", contains: "here-document"},
		{name: "tab-stripped here-document", template: "cat <<-EOF\n\tsafe\n\t${item.x}\n\tEOF", contains: "here-document"},
		{name: "second here-document", template: "cat <<A <<B\na\nA\n${item.x}\nB", contains: "here-document"},
		{name: "here-document delimiter", template: "cat <<${item.x}\nx\n", contains: "here-document delimiter"},
		{name: "parameter expansion", template: "echo $${V:-${item.x}}", contains: "${...}"},
		{name: "quotes in parameter expansion", template: "echo $${V:-\"${item.x}\"}", contains: "${...}"},
		{name: "arithmetic", template: "echo $(( ${item.x} + 1 ))", contains: "$((...))"},
		{name: "after a backslash", template: `echo \${item.x}`, contains: "after a backslash"},
		{name: "after a backslash in double quotes", template: `echo "\${item.x}"`, contains: "after a backslash"},
		{name: "after bash $'...'", template: "echo $'a\\'' ${item.x}", contains: "$'...'"},
		{name: "after case in command substitution", template: "echo \"$(case a in a) echo ${item.x};; esac)\"", contains: "case statement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl := mustParse(t, tt.template)
			_, err := Expand(tpl, Vars{Item: json.RawMessage(`{"x":"v"}`)})
			require.ErrorIs(t, err, ErrUnsafePosition)
			require.Contains(t, err.Error(), "${item.x}: cannot be quoted safely")
			require.Contains(t, err.Error(), tt.contains)
			verr := Validate(tpl)
			require.ErrorIs(t, verr, ErrUnsafePosition)
			require.Equal(t, err.Error(), verr.Error())
		})
	}
}

func TestVarsEnviron(t *testing.T) {
	t.Parallel()
	v := Vars{Item: json.RawMessage(`{"id":"a"}`), ItemID: "a", JobID: "j", Attempt: 3}
	require.Equal(t, []string{`ITEM_JSON={"id":"a"}`, "ITEM_ID=a", "JOB_ID=j", "ATTEMPT=3"}, v.Environ())
	v.Map = &MapVars{Results: "r", Successful: 1, Failed: 2, Total: 3}
	require.Equal(t, []string{`ITEM_JSON={"id":"a"}`, "ITEM_ID=a", "JOB_ID=j", "ATTEMPT=3",
		"MAP_RESULTS=r", "MAP_SUCCESSFUL=1", "MAP_FAILED=2", "MAP_TOTAL=3"}, v.Environ())
}

// FuzzExpand checks that Expand never panics, that it and Validate agree
// on unsafe positions, and that a bare reference always expands to one
// quoted word.
func FuzzExpand(f *testing.F) {
	f.Add("printf '[%s]' ${item.x}", "v")
	f.Add("echo \"${item.x}\" '${item.x}' `x` $(( 1 )) $${A:-b} # ${item.x}\ncat <<EOF\n${item.x}\nEOF\n", "'; rm -rf / #")
	f.Add("$'a\\'' ${item.x}", "$(id)")
	for _, p := range payloads {
		f.Add("x ${item.x} y", p)
	}
	f.Fuzz(func(t *testing.T, template, value string) {
		tpl, err := messages.ParseTemplate(template)
		if err != nil {
			return
		}
		item, err := json.Marshal(map[string]string{"x": value})
		require.NoError(t, err)
		var back map[string]string // JSON turns invalid UTF-8 into U+FFFD
		require.NoError(t, json.Unmarshal(item, &back))
		value = back["x"]
		got, err := Expand(tpl, Vars{Item: item, LookupEnv: func(string) (string, bool) { return value, true }, Map: &MapVars{}})
		verr := Validate(tpl)
		require.Equal(t, verr != nil, errors.Is(err, ErrUnsafePosition), "Expand: %v; Validate: %v", err, verr)
		if err == nil && len(tpl.Parts) == 1 && tpl.Parts[0].Ref != nil && tpl.Parts[0].Ref[0] == messages.RefItem && len(tpl.Parts[0].Ref) == 2 && tpl.Parts[0].Ref[1] == "x" {
			w, ok := unquote(got)
			require.True(t, ok)
			require.Equal(t, value, w)
		}
	})
}
