package shell

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"mvdan.cc/sh/v3/syntax"

	"github.com/jetfleet/jetfleet/internal/wire"
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

func mustParse(t testing.TB, s string) wire.Template {
	t.Helper()
	tpl, err := wire.ParseTemplate(s)
	require.NoError(t, err)
	return tpl
}

func itemWith(t testing.TB, fields map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(fields)
	require.NoError(t, err)
	return b
}

// junk is every byte but NUL that a JSON string can carry as one, plus a
// few multi-byte runes: "NUL-free binary" item data.
var junk = func() string {
	var b strings.Builder
	for c := 1; c < 0x80; c++ {
		b.WriteByte(byte(c))
	}
	b.WriteString("\u00a0é\u2028\u2029\ufeff🙂")
	return b.String()
}()

// hostile are payloads written to run something if they ever escape their
// quoting, in each shell's way: they create a file or print EXEC.
var hostile = []string{
	"a[$(touch PWNED)]",
	"x[$(touch PWNED)]+1",
	"a[`touch PWNED`]",
	"$(touch PWNED)",
	"`touch PWNED`",
	"'$(touch PWNED)'",
	"\"$(touch PWNED)\"",
	"'\"$(touch PWNED)\"'",
	"\\'$(touch PWNED)",
	"$(echo EXEC)",
	"${PATH:$(touch PWNED)}",
	"$((1+1))",
	"\n$(touch PWNED)\n",
	"EOF\n$(touch PWNED)\nEOF",
	junk,
}

func allPayloads() []string { return append(append([]string(nil), payloads...), hostile...) }

// TestExpandInjection expands every payload at every kind of position and
// runs the result under bash, dash and busybox sh (those installed): each
// value must arrive as exactly one literal argument (or the literal part of
// one), byte for byte, and nothing else may run.
func TestExpandInjection(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name     string
		template string
		want     func(v string) string
		bashOnly bool
	}{
		{name: "bare word", template: `printf '[%s]' ${item.x}`, want: func(v string) string { return "[" + v + "]" }},
		{name: "argument count", template: `set -- ${item.x}; printf '%d' $#`, want: func(string) string { return "1" }},
		{name: "double quoted", template: `printf '[%s]' "${item.x}"`, want: func(v string) string { return "[" + v + "]" }},
		{name: "inside double quotes", template: `printf '[%s]' "pre ${item.x} post"`, want: func(v string) string { return "[pre " + v + " post]" }},
		{name: "inside single quotes", template: `printf '[%s]' 'pre ${item.x} post'`, want: func(v string) string { return "[pre " + v + " post]" }},
		{name: "part of a word", template: `printf '[%s]' pre${item.x}post`, want: func(v string) string { return "[pre" + v + "post]" }},
		{name: "twice in a word", template: `printf '[%s]' ${item.x}"-"${item.x}`, want: func(v string) string { return "[" + v + "-" + v + "]" }},
		{name: "after an escaped backslash", template: `printf '[%s]' a\\${item.x}`, want: func(v string) string { return `[a\` + v + "]" }},
		{name: "after a mid-word hash", template: `printf '[%s]' a#${item.x}`, want: func(v string) string { return "[a#" + v + "]" }},
		{name: "after $#", template: `printf '[%s]' $#${item.x}`, want: func(v string) string { return "[0" + v + "]" }},
		{name: "assignment", template: `x=${item.x}; printf '[%s]' "$x"`, want: func(v string) string { return "[" + v + "]" }},
		{name: "export", template: `export X=${item.x}; printf '[%s]' "$X"`, want: func(v string) string { return "[" + v + "]" }},
		{name: "command substitution", template: `printf '[%s]' "$(printf '%s.' ${item.x})"`, want: func(v string) string { return "[" + v + ".]" }},
		{name: "quoted in command substitution", template: `printf '[%s]' "$(printf '%s.' "${item.x}")"`, want: func(v string) string { return "[" + v + ".]" }},
		{name: "after a comment line", template: "# a comment ${item.x}\nprintf '[%s]' ${item.x}", want: func(v string) string { return "[" + v + "]" }},
		{name: "with a trailing comment", template: `printf '[%s]' ${item.x} # and ${item.x}`, want: func(v string) string { return "[" + v + "]" }},
		{name: "after a here-document", template: "cat <<EOF\nbody\nEOF\nprintf '[%s]' ${item.x}", want: func(v string) string { return "body\n[" + v + "]" }},
		{name: "on a here-document's command line", template: "cat <<'EOF'; printf '[%s]' ${item.x}\n$body\nEOF", want: func(v string) string { return "$body\n[" + v + "]" }},
		{name: "after an arithmetic expansion", template: `printf '[%s]' $((1+2))${item.x}`, want: func(v string) string { return "[3" + v + "]" }},
		{name: "after a parameter expansion", template: `printf '[%s]' $${UNSET_SHELL_TEST_VAR:-d}${item.x}`, want: func(v string) string { return "[d" + v + "]" }},
		{name: "in a parameter expansion's command substitution", template: `printf '[%s]' "$${UNSET_SHELL_TEST_VAR:-$(printf '%s' ${item.x})}"`, want: func(v string) string { return "[" + strings.TrimRight(v, "\n") + "]" }},
		{name: "after backquotes", template: "printf '[%s]' `echo q`${item.x}", want: func(v string) string { return "[q" + v + "]" }},
		{name: "after a top-level case", template: "case a in a) printf '[%s]' ${item.x};; esac", want: func(v string) string { return "[" + v + "]" }},
		{name: "case in a command substitution", template: `printf '%s' "$(case a in a) printf '[%s]' ${item.x};; esac)"`, want: func(v string) string { return "[" + v + "]" }},
		{name: "case pattern", template: `case ${item.x} in ${item.x}) printf match;; *) printf nomatch;; esac`, want: func(string) string { return "match" }},
		{name: "for loop", template: `for v in ${item.x}; do printf '[%s]' "$v"; done`, want: func(v string) string { return "[" + v + "]" }},
		{name: "test operands", template: `[ ${item.x} = ${item.x} ] && printf same`, want: func(string) string { return "same" }},
		{name: "test -gt operand (no arithmetic in test)", template: `[ ${item.x} -gt 0 ] 2>/dev/null; printf ok`, want: func(string) string { return "ok" }},
		{name: "printf %d argument", template: `printf '%d' ${item.x} >/dev/null 2>&1; printf ok`, want: func(string) string { return "ok" }},
		{name: "double brackets, pattern is literal", template: `[[ ${item.x} == ${item.x} ]] && printf same`, want: func(string) string { return "same" }, bashOnly: true},
		{name: "regex operand is literal", template: `[[ "${item.x}" =~ ^${item.x}$ ]] && printf match`, want: func(string) string { return "match" }, bashOnly: true},
		{name: "array element", template: `a=(${item.x} x); printf '[%s]%d' "$${a[0]}" "$${#a[@]}"`, want: func(v string) string { return "[" + v + "]2" }, bashOnly: true},
		{name: "declare value", template: `declare x=${item.x}; printf '[%s]' "$x"`, want: func(v string) string { return "[" + v + "]" }, bashOnly: true},
		{name: "local value", template: `f() { local x=${item.x}; printf '[%s]' "$x"; }; f`, want: func(v string) string { return "[" + v + "]" }, bashOnly: true},
		{name: "here-document", template: "cat <<EOF\n${item.x}\nEOF", want: func(v string) string { return v + "\n" }},
		{name: "here-document with quotes around", template: "cat << EOF\npre \"${item.x}\" '${item.x}' $${UNSET_SHELL_TEST_VAR}post\nEOF", want: func(v string) string { return `pre "` + v + `" '` + v + "' post\n" }},
		{name: "tab-stripped here-document", template: "cat <<-EOF\n\t${item.x}\n\tEOF", want: func(v string) string { return v + "\n" }},
		{name: "second here-document", template: "cat <<A <<B\na\nA\n${item.x}\nB", want: func(v string) string { return v + "\n" }},
		{name: "here-document in a command substitution", template: "printf '[%s]' \"$(cat <<EOF\n${item.x}\nEOF\n)\"", want: func(v string) string { return "[" + strings.TrimRight(v, "\n") + "]" }},
		{name: "here-string", template: `cat <<< ${item.x}`, want: func(v string) string { return v + "\n" }, bashOnly: true},
		{name: "printf -v value", template: `printf -v out '%s' ${item.x}; printf '[%s]' "$out"`, want: func(v string) string { return "[" + v + "]" }, bashOnly: true},
		{name: "parameter expansion of a copy", template: `v=${item.x}; printf '[%s]' "$${UNSET_SHELL_TEST_VAR:-$v}"`, want: func(v string) string { return "[" + v + "]" }},
	}
	all := shells(t)
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			tpl := mustParse(t, sh.template)
			require.NoError(t, Validate(tpl))
			// The same shape reading captured variables (capture:): a
			// field of a JSON capture, and a string capture.
			field := mustParse(t, strings.ReplaceAll(sh.template, "${item.x}", "${cap.x}"))
			whole := mustParse(t, strings.ReplaceAll(sh.template, "${item.x}", "${s}"))
			// One run per shape and shell: every payload in sequence.
			var script, want strings.Builder
			for _, p := range allPayloads() {
				if sh.name == "here-string" && strings.HasSuffix(p, "\n") {
					continue // <<< adds a newline; the comparison would not see it
				}
				obj, err := json.Marshal(map[string]string{"x": p})
				require.NoError(t, err)
				str, err := json.Marshal(p)
				require.NoError(t, err)
				caps := map[string]*wire.Capture{"cap": {Value: obj}, "s": {Value: str}}
				for _, tp := range []wire.Template{tpl, field, whole} {
					got, err := Expand(tp, Vars{Item: itemWith(t, map[string]any{"x": p}), Captures: caps})
					require.NoError(t, err, "payload %q", p)
					script.WriteString(got + "\nprintf '\\n---\\n'\n")
					want.WriteString(sh.want(p) + "\n---\n")
				}
			}
			for _, shell := range all {
				if sh.bashOnly && !shell.bash {
					continue
				}
				out, stderr, created := shell.run(t, script.String())
				require.Empty(t, created, "%s: the script created files; stderr %q", shell.name, stderr)
				require.Equal(t, want.String(), out, "%s; stderr %q", shell.name, stderr)
			}
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

// TestExpandNeverReadsTheAgentEnv: without a LookupEnv, ${env.NAME} finds
// nothing, not the process's own variables.
func TestExpandNeverReadsTheAgentEnv(t *testing.T) {
	t.Setenv("JETFLEET_SHELL_TEST", "from the agent")
	_, err := Expand(mustParse(t, "echo ${env.JETFLEET_SHELL_TEST}"), Vars{})
	require.ErrorIs(t, err, ErrEnvUnset)
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
		{name: "quoted here-document", template: "cat <<'EOF'\nsafe\n${item.x}\nEOF", contains: "quoted here-document (<<'EOF')"},
		{name: "double-quoted here-document delimiter", template: "cat <<\"EOF\"\n${item.x}\nEOF", contains: "quoted here-document"},
		{name: "escaped here-document delimiter", template: "cat <<\\EOF\n${item.x}\nEOF", contains: "quoted here-document"},
		{name: "command substitution in a here-document", template: "cat <<EOF\n$(printf %s ${item.x})\nEOF", contains: "an expansion within a here-document"},
		{name: "parameter expansion in a here-document", template: "cat <<EOF\n$${V:-${item.x}}\nEOF", contains: "an expansion within a here-document"},
		{name: "after a backslash in a here-document", template: "cat <<EOF\n\\${item.x}\nEOF", contains: "follows a backslash"},
		{name: "parameter expansion", template: "echo $${V:-${item.x}}", contains: "${...}"},
		{name: "quotes in parameter expansion", template: "echo $${V:-\"${item.x}\"}", contains: "${...}"},
		{name: "after a backslash", template: `echo \${item.x}`, contains: "follows a backslash"},
		{name: "after a backslash in double quotes", template: `echo "\${item.x}"`, contains: "follows a backslash"},
		{name: "after bash $'...'", template: "echo $'a\\'' ${item.x}", contains: "$'...'"},
		{name: "inside bash $'...'", template: "echo $'a ${item.x}'", contains: "$'...'"},
		{name: "inside $\"...\"", template: "echo $\"a ${item.x}\"", contains: `$"..."`},
		{name: "extended glob", template: "echo @(a|${item.x})", contains: "extended glob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl := mustParse(t, tt.template)
			_, err := Expand(tpl, Vars{Item: json.RawMessage(`{"x":"v"}`)})
			require.ErrorIs(t, err, ErrUnsafePosition)
			require.Regexp(t, `^\$\{item\.x\}( \(line \d\))?: cannot be quoted safely: `, err.Error())
			require.Contains(t, err.Error(), tt.contains)
			verr := Validate(tpl)
			require.ErrorIs(t, verr, ErrUnsafePosition)
			require.Equal(t, err.Error(), verr.Error())
		})
	}
}

// evaluated are templates where bash evaluates a value whatever its
// quoting: Validate refuses each, and execs says whether the expansion the
// old lexer produced (the value quoted with Quote) runs the item's
// a[$(touch PWNED)] under bash — proof that the refusal is needed.
var evaluated = []struct {
	name     string
	template string
	contains string
	execs    bool
}{
	{name: "[[ -gt ]]", template: `[[ ${item.n} -gt 5 ]]`, contains: "arithmetic in [[ ... -gt ... ]]", execs: true},
	{name: "[[ -eq ]] quoted", template: `[[ "${item.n}" -eq 5 ]]`, contains: "arithmetic in [[ ... -eq ... ]]", execs: true},
	{name: "[[ -ne ]] right operand", template: `[[ 1 -ne ${item.n} ]]`, contains: "[[ ... -ne ... ]]", execs: true},
	{name: "(( ))", template: `(( ${item.n} > 1 ))`, contains: "arithmetic in ((...))"},
	{name: "$(( ))", template: `echo $(( ${item.n} + 1 ))`, contains: "arithmetic in $((...))"},
	{name: "$[ ]", template: `echo $[ ${item.n} + 1 ]`, contains: "arithmetic in $[...]"},
	{name: "let", template: `let n=${item.n}`, contains: "arithmetic in let", execs: true},
	{name: "builtin let", template: `builtin let n=${item.n}`, contains: "arithmetic in let", execs: true},
	{name: "declare -i", template: `declare -i n=${item.n}`, contains: "arithmetic in declare -i", execs: true},
	{name: "local -i", template: `f() { local -i n=${item.n}; }; f`, contains: "arithmetic in local -i", execs: true},
	{name: "typeset -i then assign", template: "typeset -i n\nn=${item.n}", contains: "declared with typeset -i", execs: true},
	{name: "integer append", template: "declare -i n=0; n+=${item.n}", contains: "declared with declare -i", execs: true},
	{name: "array subscript", template: `arr[${item.n}]=1`, contains: "arithmetic in an array subscript", execs: true},
	{name: "array element subscript", template: `arr=([${item.n}]=1)`, contains: "arithmetic in an array subscript", execs: true},
	{name: "subscript in an expansion", template: `a=(1); echo "$${a[${item.n}]}"`, contains: "arithmetic in an array subscript", execs: true},
	{name: "slice", template: `echo "$${PATH:${item.n}}"`, contains: "arithmetic in ${var:offset:length}", execs: true},
	{name: "c-style for", template: `for ((i = 0; i < ${item.n}; i++)); do :; done`, contains: "arithmetic in for ((...))"},
	{name: "assigned, then $((n))", template: `n=${item.n}; echo $((n + 1))`, contains: "assigned to n, which is used in $((...)) at line 1", execs: true},
	{name: "assigned, then $(($n))", template: "n=${item.n}\necho $(($n + 1))", contains: "assigned to n, which is used in $((...)) at line 2", execs: true},
	{name: "assigned, then [[ -gt ]]", template: `n="${item.n}"; [[ $n -gt 1 ]]`, contains: "assigned to n, which is used in [[ ... -gt ... ]]", execs: true},
	{name: "assigned, then [[ n -gt ]]", template: `n=${item.n}; [[ n -gt 1 ]]`, contains: "assigned to n", execs: true},
	{name: "assigned twice, then (( ))", template: `n=${item.n}; m=$n; (( m > 1 ))`, contains: "assigned to m, which is used in ((...))", execs: true},
	{name: "for variable in arithmetic", template: `for n in ${item.n}; do echo $((n)); done`, contains: "assigned to n", execs: true},
	{name: "assigned, then a subscript", template: `n=${item.n}; a[n]=1`, contains: "assigned to n, which is used in an array subscript", execs: true},
	{name: "assigned, then declare -i", template: `n=${item.n}; declare -i m=n`, contains: "assigned to n", execs: true},
	{name: "exported, then let", template: `export n=${item.n}; let m=n+1`, contains: "assigned to n", execs: true},
	{name: "assigned, then indirect", template: `x=${item.x}; echo "$${!x}"`, contains: "assigned to x, whose value at line 1 it names a variable in ${!...}", execs: true},
	{name: "printf -v", template: `printf -v ${item.x} %s v`, contains: "names a variable in printf -v", execs: true},
	{name: "read", template: `read ${item.x} <<< v`, contains: "names a variable in read", execs: true},
	{name: "unset", template: `a=(1); unset ${item.x}`, contains: "names a variable in unset", execs: true},
	{name: "declare name", template: `declare ${item.x}=1`, contains: "names a variable", execs: true},
	{name: "declare quoted argument", template: `declare "${item.x}=1"`, contains: "names a variable in declare", execs: true},
	{name: "declare of a quoted array", template: `declare -a "y=(${item.x})"`, contains: "names a variable in declare", execs: true},
	{name: "command export", template: `command export X=${item.x}`, contains: "names a variable in export"},
	{name: "declare -n", template: `declare -n r=${item.x}; echo "$r"`, contains: "declare -n", execs: true},
	{name: "[[ -v ]]", template: `[[ -v ${item.x} ]]`, contains: "names a variable in [[ -v ... ]]", execs: true},
	{name: "test -v", template: `test -v ${item.x}`, contains: "names a variable in test -v", execs: true},
	{name: "[ -v ]", template: `[ -v ${item.x} ]`, contains: "names a variable in [ -v", execs: true},
	{name: "assignment name", template: `${item.x}=1 true`, contains: "names a variable in an assignment"},
	{name: "for variable name", template: `for ${item.x} in a; do :; done`, contains: "names a variable in a for loop"},
	{name: "eval", template: `eval echo ${item.x}`, contains: "run as a command by eval", execs: true},
	{name: "command eval", template: `command eval "echo ${item.x}"`, contains: "run as a command by eval", execs: true},
	{name: "trap", template: `trap ${item.x} EXIT`, contains: "run as a command by trap", execs: true},
	{name: "alias", template: "alias x=${item.x}\nx", contains: "run as a command by alias"},
	{name: "PS4", template: `PS4=${item.x}; set -x; true`, contains: "run as a command by PS4, whose value the shell expands or runs as code", execs: true},
	{name: "exported BASH_ENV", template: `export BASH_ENV=${item.x}`, contains: "BASH_ENV"},
	{name: "eval of a copy", template: `c=${item.x}; eval "echo $c"`, contains: "assigned to c", execs: true},
}

func TestExpandRefusesEvaluatedPositions(t *testing.T) {
	t.Parallel()
	bash := bashShell(t)
	for _, tt := range evaluated {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl := mustParse(t, tt.template)
			err := Validate(tpl)
			require.ErrorIs(t, err, ErrUnsafePosition)
			require.Contains(t, err.Error(), tt.contains)
			var re *RefError
			require.ErrorAs(t, err, &re)
			_, xerr := Expand(tpl, Vars{Item: json.RawMessage(`{"n":"1","x":"v"}`)})
			require.Equal(t, err.Error(), xerr.Error())
			if !tt.execs {
				return
			}
			// What quoting alone would have run.
			_, stderr, created := bash.run(t, quotedEverywhere(tpl, "a[$(touch PWNED)]"))
			require.NotEmpty(t, created, "bash did not run the payload; stderr %q", stderr)
		})
	}
}

// quotedEverywhere writes tpl with every reference replaced by Quote(v):
// what the hand-written lexer produced for these positions.
func quotedEverywhere(tpl wire.Template, v string) string {
	var b strings.Builder
	for _, p := range tpl.Parts {
		if p.Ref == nil {
			b.WriteString(p.Literal)
		} else {
			b.WriteString(Quote(v))
		}
	}
	return b.String()
}

// TestExpandSuggestedFormIsSafe: the form the arithmetic refusal advises is
// accepted, refuses a hostile value without running it, and computes with
// a number.
func TestExpandSuggestedFormIsSafe(t *testing.T) {
	t.Parallel()
	err := Validate(mustParse(t, `echo $((${item.n} + 1))`))
	require.Error(t, err)
	_, suggestion, ok := strings.Cut(err.Error(), "use the checked copy: ")
	require.True(t, ok, err.Error())
	tpl := mustParse(t, suggestion+"\necho $((n + 1))")
	require.NoError(t, Validate(tpl), suggestion)
	for _, sh := range shells(t) {
		for _, v := range hostile {
			script, err := Expand(tpl, Vars{Item: itemWith(t, map[string]any{"n": v})})
			require.NoError(t, err)
			out, stderr, created := sh.run(t, script)
			require.Empty(t, created, "%s ran %q: %s", sh.name, v, stderr)
			require.Empty(t, out)
		}
		script, err := Expand(tpl, Vars{Item: json.RawMessage(`{"n": -42}`)})
		require.NoError(t, err)
		out, stderr, _ := sh.run(t, script)
		require.Equal(t, "-41\n", out, "%s: %s", sh.name, stderr)
	}
}

// TestExpandHeredocDelimiterDesync: a here-document delimiter with an
// expansion in it ended the hand-written lexer's here-document early, so a
// reference still inside it (for the shell) was quoted as a bare word, and
// the here-document ran its $(...). The parser refuses the script.
func TestExpandHeredocDelimiterDesync(t *testing.T) {
	t.Parallel()
	template := "cat <<EOF$(true)\nEOF$\necho ${item.x}\nEOF$(true)\n"
	tpl := mustParse(t, template)
	err := Validate(tpl)
	require.ErrorIs(t, err, ErrSyntax)
	require.Contains(t, err.Error(), "line 1: expansions not allowed in heredoc words")
	bash := bashShell(t)
	_, stderr, created := bash.run(t, quotedEverywhere(tpl, "$(touch PWNED)"))
	require.NotEmpty(t, created, "stderr %q", stderr)
}

func TestExpandSyntaxError(t *testing.T) {
	t.Parallel()
	tests := []struct{ template, contains string }{
		{template: "echo ${item.x} 'unterminated", contains: "line 1: reached EOF without closing quote `'`"},
		{template: "if true; then\necho ${item.x}\n", contains: "line 1: `if` statement must end with `fi`"},
		{template: "cat <<${item.x}\nx\n", contains: "unclosed here-document `${item.x}`"},
	}
	for _, tt := range tests {
		err := Validate(mustParse(t, tt.template))
		require.ErrorIs(t, err, ErrSyntax, tt.template)
		require.Contains(t, err.Error(), tt.contains)
		require.NotContains(t, err.Error(), "JFREF")
	}
	// Without references there is nothing to place: not parsed.
	require.NoError(t, Validate(mustParse(t, "echo 'unterminated")))
}

// TestExpandAgentNumbers: ${attempt} and ${map.*} counts are numbers the
// agent makes, usable in arithmetic.
func TestExpandAgentNumbers(t *testing.T) {
	t.Parallel()
	vars := Vars{Attempt: 3, Map: &MapVars{Successful: 7, Failed: 3, Total: 10}, Item: json.RawMessage(`{}`)}
	tests := []struct {
		template, want string
		bashOnly       bool
	}{
		{template: `echo $(( ${attempt} * 2 ))`, want: "6\n"},
		{template: `echo $(( ${map.failed} * 100 / ${map.total} ))%`, want: "30%\n"},
		{template: `echo "$${UNSET_SHELL_TEST_VAR:-${attempt}}"`, want: "3\n"},
		{template: `echo ${attempt} "${attempt}" '${attempt}'`, want: "3 3 3\n"},
		{template: `(( ${attempt} > 2 )) && echo retry`, want: "retry\n", bashOnly: true},
		{template: `[[ ${map.successful} -ge 5 ]] && echo enough`, want: "enough\n", bashOnly: true},
	}
	for _, tt := range tests {
		script, err := Expand(mustParse(t, tt.template), vars)
		require.NoError(t, err, tt.template)
		for _, sh := range shells(t) {
			if tt.bashOnly && !sh.bash {
				continue
			}
			out, stderr, _ := sh.run(t, script)
			require.Equal(t, tt.want, out, "%s: %s: %s", sh.name, script, stderr)
		}
	}
	// Everything else the agent does not make stays out of arithmetic.
	for _, ref := range []string{"${item_id}", "${job_id}", "${env.N}", "${map.results}", "${item}"} {
		err := Validate(mustParse(t, "echo $(( "+ref+" ))"))
		require.ErrorIs(t, err, ErrUnsafePosition, ref)
	}
}

// shape lists a script's syntax nodes but for literals and single-quoted
// strings: what a value, written as Expand writes it, must not change.
func shape(t testing.TB, script string, lang syntax.LangVariant) (string, bool) {
	t.Helper()
	f, err := parse(script, lang)
	if err != nil {
		return err.Error(), false
	}
	var b strings.Builder
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n.(type) {
		case nil, *syntax.Lit, *syntax.SglQuoted:
		default:
			fmt.Fprintf(&b, "%T ", n)
		}
		return true
	})
	return b.String(), true
}

// FuzzExpand checks that Expand never panics, that it and Validate agree,
// that a bare reference always expands to one quoted word, and that no
// value changes the structure of the script it is written into: parsed as
// bash and as POSIX sh, the expanded script has the same syntax nodes, but
// for literals, as the template with plain words in place of its
// references.
func FuzzExpand(f *testing.F) {
	f.Add("printf '[%s]' ${item.x}", "v")
	f.Add("echo \"${item.x}\" '${item.x}' `x` $(( 1 )) $${A:-b} # ${item.x}\ncat <<EOF\n${item.x}\nEOF\n", "'; rm -rf / #")
	f.Add("$'a\\'' ${item.x}", "$(id)")
	f.Add("n=${item.n}; echo $((n + 1))", "a[$(id)]")
	f.Add("[[ ${item.x} == y ]] && (( ${attempt} > 1 )); a=(${item.x}); echo \"${a[0]}\"", "x")
	f.Add("case ${item.x} in (${item.x}) echo \"$(printf %s ${map.results})\";; esac", "*")
	for _, tt := range evaluated {
		f.Add(tt.template, "a[$(touch PWNED)]")
	}
	for _, p := range allPayloads() {
		f.Add("x ${item.x} y \"${item.x}\" '${item.x}'", p)
	}
	f.Fuzz(func(t *testing.T, template, value string) {
		tpl, err := wire.ParseTemplate(template)
		if err != nil || !utf8.ValidString(template) { // specs are JSON or YAML: UTF-8
			return
		}
		item, err := json.Marshal(map[string]string{"x": value, "n": value})
		require.NoError(t, err)
		var back map[string]string // JSON turns invalid UTF-8 into U+FFFD
		require.NoError(t, json.Unmarshal(item, &back))
		value = back["x"]
		vars := Vars{Item: item, ItemID: value, JobID: value, Attempt: 2,
			LookupEnv: func(string) (string, bool) { return value, true }, Map: &MapVars{Results: value, Total: 12}}
		got, err := Expand(tpl, vars)
		verr := Validate(tpl)
		require.Equal(t, verr != nil, errors.Is(err, ErrUnsafePosition) || errors.Is(err, ErrSyntax), "Expand: %v; Validate: %v", err, verr)
		if err != nil {
			return
		}
		if len(tpl.Parts) == 1 && tpl.Parts[0].Ref != nil && tpl.Parts[0].Ref[0] == wire.RefItem && len(tpl.Parts[0].Ref) == 2 && tpl.Parts[0].Ref[1] == "x" {
			w, ok := unquote(got)
			require.True(t, ok)
			require.Equal(t, value, w)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return
		}
		// The structure the references make with a plain value (the
		// placeholders' own, but for here-documents, where each is a
		// variable's expansion) is the one any value makes.
		s, err := Compile(tpl)
		require.NoError(t, err)
		plain, _, err := s.ExpandEnv(Vars{Item: json.RawMessage(`{"x":"v","n":"v"}`), ItemID: "v", JobID: "v", Attempt: 2,
			LookupEnv: func(string) (string, bool) { return "v", true }, Map: &MapVars{Results: "v", Total: 12}})
		if err != nil {
			return // ${map.results_json} of an existing file: not the plain value's
		}
		got, _, err = s.ExpandEnv(vars)
		require.NoError(t, err)
		for _, lang := range []syntax.LangVariant{syntax.LangBash, syntax.LangPOSIX} {
			want, ok := shape(t, plain, lang)
			if !ok {
				continue
			}
			have, ok := shape(t, got, lang)
			require.True(t, ok, "%s: the expansion does not parse: %s\n%s", lang, have, got)
			require.Equal(t, want, have, "%s: the value changed the script's structure:\n%s", lang, got)
		}
	})
}

func TestVarsEnviron(t *testing.T) {
	t.Parallel()
	v := Vars{Item: json.RawMessage(`{"id":"a"}`), ItemID: "a", JobID: "j", Attempt: 3}
	require.Equal(t, []string{`ITEM_JSON={"id":"a"}`, "ITEM_ID=a", "JOB_ID=j", "ATTEMPT=3"}, v.Environ())
	v.Map = &MapVars{Results: "r", Successful: 1, Failed: 2, Total: 3}
	require.Equal(t, []string{`ITEM_JSON={"id":"a"}`, "ITEM_ID=a", "JOB_ID=j", "ATTEMPT=3",
		"MAP_RESULTS=r", "MAP_SUCCESSFUL=1", "MAP_FAILED=2", "MAP_TOTAL=3"}, v.Environ())
}

// FuzzExpandShells writes fuzzed values into a script that uses every kind
// of position, runs it under bash, dash and busybox sh (those installed),
// and checks that each value arrives byte for byte and nothing else runs.
func FuzzExpandShells(f *testing.F) {
	for _, p := range allPayloads() {
		f.Add(p)
	}
	tpl := mustParse(f, `printf '[%s]' ${item.x} "${item.x}" 'q${item.x}q' "$(printf '%s.' ${item.x})" a${item.x}"b"
x=${item.x}; printf '[%s]' "$x"; set -- ${item.x}; printf '%d' $#
case ${item.x} in ${item.x}) printf match;; esac # ${item.x}
cat <<'EOF'
$(touch PWNED) $${item.x}
EOF`)
	want := func(v string) string {
		return "[" + v + "][" + v + "][q" + v + "q][" + v + ".][a" + v + "b][" + v + "]1match$(touch PWNED) ${item.x}\n"
	}
	var all []testShell
	f.Fuzz(func(t *testing.T, value string) {
		if all == nil {
			all = shells(t)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return // no item can hold one: Expand refuses it
		}
		item, err := json.Marshal(map[string]string{"x": value})
		require.NoError(t, err)
		var back map[string]string // JSON turns invalid UTF-8 into U+FFFD
		require.NoError(t, json.Unmarshal(item, &back))
		value = back["x"]
		script, err := Expand(tpl, Vars{Item: item})
		require.NoError(t, err)
		for _, sh := range all {
			out, stderr, created := sh.run(t, script)
			require.Empty(t, created, "%s created files: %s", sh.name, stderr)
			require.Equal(t, want(value), out, "%s: %s", sh.name, stderr)
		}
	})
}

// TestExpandEnvHeredoc: a reference in a here-document's text is the
// expansion of a variable whose value ExpandEnv returns; Expand assigns it
// at the top of the script instead.
func TestExpandEnvHeredoc(t *testing.T) {
	t.Parallel()
	s, err := Compile(mustParse(t, "cat <<EOF\nid: ${item_id} ${item.x}\nEOF\necho ${item.x}"))
	require.NoError(t, err)
	v := Vars{ItemID: "i1", Item: json.RawMessage(`{"x":"$(id)'"}`)}
	script, env, err := s.ExpandEnv(v)
	require.NoError(t, err)
	require.Equal(t, "cat <<EOF\nid: ${JETFLEET_HD0} ${JETFLEET_HD1}\nEOF\necho '$(id)'\\'''", script)
	require.Equal(t, []string{"JETFLEET_HD0=i1", "JETFLEET_HD1=$(id)'"}, env)
	whole, err := s.Expand(v)
	require.NoError(t, err)
	require.Equal(t, "JETFLEET_HD0='i1'\nJETFLEET_HD1='$(id)'\\'''\n"+script, whole)
}
