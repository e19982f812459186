package expr

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func decode(t testing.TB, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

const item = `{"id": "a1", "severity": "high", "priority": 7, "score": 5.0, "path": "src/lib.rs",
	"has_issues": true, "tags": ["important", "ui"], "matrix": [[1, 42], [3]], "optional": null,
	"results": [{"score": 10}, {"score": 90}, {"score": 81}], "meta": {"owner": {"email": "x@example.com"}},
	"unified_score": {"final_score": 12.5}, "count": "12"}`

func TestEval(t *testing.T) {
	v := decode(t, item)
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"severity == 'high'", true},
		{"severity = 'high'", true},
		{`severity == "high"`, true},
		{"severity != 'high'", false},
		{"severity != 'low'", true},
		{"priority > 5", true},
		{"priority >= 7", true},
		{"priority < 7", false},
		{"priority <= 7.0", true},
		{"priority == 7.0", true},
		{"score == 5", true},
		{"count > 5", false}, // a string and a number never order
		{"count == 12", false},
		{"severity == 'high' && priority > 5", true},
		{"severity == 'high' AND priority > 8", false},
		{"severity == 'low' || priority > 5", true},
		{"severity == 'low' OR priority > 8", false},
		{"severity == 'low' or priority > 5", true},
		{"!(severity == 'low')", true},
		{"!is_null(optional)", false},
		{"NOT is_null(severity)", true},
		{"severity == 'low' || severity == 'high' && priority > 8", false}, // && binds tighter
		{"(severity == 'low' || severity == 'high') && priority > 5", true},
		{"severity in ['high', 'critical']", true},
		{"severity in ['low']", false},
		{"severity not in ['low']", true},
		{"priority in [1, 7]", true},
		{"missing in ['x']", false},
		{"unified_score.final_score >= 5", true},
		{"meta.owner.email ends_with '@example.com'", true},
		{"tags[0] == 'important'", true},
		{"tags[5] == 'important'", false},
		{"results[2].score > 80", true},
		{"matrix[0][1] == 42", true},
		{"is_null(optional)", true},
		{"is_null(missing)", true},
		{"is_null(severity)", false},
		{"is_not_null(severity)", true},
		{"is_not_null(missing)", false},
		{"optional == null", true},
		{"missing == null", true},
		{"missing != null", false},
		{"missing == 'x'", false},
		{"missing != 'x'", true},
		{"missing > 3", false},
		{"is_number(score)", true},
		{"is_number(count)", false},
		{"is_string(count)", true},
		{"is_bool(has_issues)", true},
		{"is_array(tags)", true},
		{"is_object(meta)", true},
		{"is_object(tags)", false},
		{"contains(path, 'lib')", true},
		{"starts_with(path, 'src/')", true},
		{"ends_with(path, '.rs')", true},
		{"ends_with(priority, '7')", false},
		{"path contains 'lib'", true},
		{"length(tags) == 2", true},
		{"length(tags, 2)", true},
		{"length(severity) > 3", true},
		{"length(meta) == 1", true},
		{"length(missing) == 0", false},
		{`matches(path, '\.rs$')`, true},
		{`path matches '\.rs$' && has_issues == true`, true},
		{`path matches '\.go$'`, false},
		{"has_issues", true},
		{"!has_issues", false},
		{"severity", false}, // a string is not true
		{"item.priority >= 5", true},
		{"item.severity == 'high'", true},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			e, err := Parse(tc.expr)
			require.NoError(t, err)
			require.Equal(t, tc.want, e.Eval(JSON(v)))
		})
	}
}

func TestItemPrefixWhenTheItemHasAnItemField(t *testing.T) {
	e, err := Parse("item.x == 1")
	require.NoError(t, err)
	require.True(t, e.Eval(JSON(decode(t, `{"item": {"x": 1}}`))))
	require.False(t, e.Eval(JSON(decode(t, `{"item": {"x": 2}, "x": 1}`))))
	require.True(t, e.Eval(JSON(decode(t, `{"x": 1}`))))
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"", "empty expression"},
		{"severity == 'high", "string not closed"},
		{"severity == ", "expected a field, a value"},
		{"(a == 1", "expected ) to close"},
		{"a == 1 b", `unexpected "b"`},
		{"a in 'x'", "in takes a list"},
		{"a in [b]", "a list holds literals"},
		{"frobnicate(a)", `unknown function "frobnicate"`},
		{"is_null(a, b)", "is_null takes 1 argument(s), got 2"},
		{"a matches '('", "invalid regular expression"},
		{"a[-1] == 1", "an index is a number >= 0"},
		{"a # 1", "unexpected character '#'"},
		{strings.Repeat("(", 200) + "a" + strings.Repeat(")", 200), "nested more than 100 deep"},
		{strings.Repeat("!", 200) + "a", "nested more than 100 deep"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			_, err := Parse(tc.expr)
			require.ErrorIs(t, err, ErrSyntax)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPaths(t *testing.T) {
	e, err := Parse("a.b > 1 && (c[0] == 'x' || is_null(d.e[2].f))")
	require.NoError(t, err)
	var got []string
	for _, p := range e.Paths() {
		got = append(got, p.String())
	}
	require.Equal(t, []string{"a.b", "c[0]", "d.e[2].f"}, got)
}

func TestSortBy(t *testing.T) {
	items := []string{
		`{"id": 1, "sev": 2, "p": "b"}`,
		`{"id": 2, "sev": null, "p": "a"}`,
		`{"id": 3, "sev": 3, "p": "c"}`,
		`{"id": 4, "p": "d"}`,
		`{"id": 5, "sev": 2, "p": "a"}`,
		`{"id": 6, "sev": 3, "p": "c"}`,
	}
	for _, tc := range []struct {
		sortBy string
		want   []int
	}{
		{"sev", []int{1, 5, 3, 6, 2, 4}},
		{"sev ASC", []int{1, 5, 3, 6, 2, 4}},
		{"sev DESC", []int{3, 6, 1, 5, 2, 4}},
		{"sev DESC NULLS FIRST", []int{2, 4, 3, 6, 1, 5}},
		{"sev nulls first", []int{2, 4, 1, 5, 3, 6}},
		{"sev DESC NULLS LAST, p ASC", []int{3, 6, 5, 1, 2, 4}},
		{"sev desc, p desc", []int{3, 6, 1, 5, 4, 2}},
		{"p, id DESC", []int{5, 2, 1, 6, 3, 4}},
	} {
		t.Run(tc.sortBy, func(t *testing.T) {
			keys, err := ParseSortBy(tc.sortBy)
			require.NoError(t, err)
			vals := make([]any, len(items))
			for i, s := range items {
				vals[i] = decode(t, s)
			}
			slices.SortStableFunc(vals, func(a, b any) int { return CompareBy(keys, JSON(a), JSON(b)) })
			var got []int
			for _, v := range vals {
				id, _ := number(v.(map[string]any)["id"])
				got = append(got, int(id))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseSortByErrors(t *testing.T) {
	for _, tc := range []struct{ sortBy, want string }{
		{"", "empty sort key"},
		{"a,,b", "empty sort key"},
		{"a DESC NULLS MIDDLE", `unexpected "NULLS MIDDLE"`},
		{"a sideways", `unexpected "sideways"`},
		{"a[x]", "an index is a number"},
	} {
		_, err := ParseSortBy(tc.sortBy)
		require.ErrorIs(t, err, ErrSyntax, tc.sortBy)
		require.ErrorContains(t, err, tc.want, tc.sortBy)
	}
}

func TestCompareMixedTypes(t *testing.T) {
	vals := []any{"b", json.Number("2"), true, []any{1}, map[string]any{}, false, json.Number("10"), "a"}
	slices.SortStableFunc(vals, Compare)
	b, err := json.Marshal(vals)
	require.NoError(t, err)
	require.Equal(t, `[false,true,2,10,"a","b",[1],{}]`, string(b))
}

func TestDistinctKey(t *testing.T) {
	require.Equal(t, "null", DistinctKey(JSON(decode(t, `{"a": null}`)), Path{{Field: "a"}}))
	require.Equal(t, "null", DistinctKey(JSON(decode(t, `{}`)), Path{{Field: "a"}}))
	require.Equal(t, `"x"`, DistinctKey(JSON(decode(t, `{"a": "x"}`)), Path{{Field: "a"}}))
	require.Equal(t, `1`, DistinctKey(JSON(decode(t, `{"a": 1}`)), Path{{Field: "a"}}))
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"a == 1", "!(a.b[0] in ['x', 2]) || matches(p, '^x')", "length(t, 2) AND x", "a.0 > .5"} {
		f.Add(s)
	}
	v := decode(f, item)
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			return
		}
		e.Eval(JSON(v))
		for _, p := range e.Paths() {
			q, err := ParsePath(p.String())
			if err == nil && !bytes.Equal([]byte(q.String()), []byte(p.String())) {
				t.Fatalf("path %q reads back as %q", p, q)
			}
		}
	})
}

func TestParseCondition(t *testing.T) {
	vars := JSON(map[string]any{
		"tests_passed": true,
		"count":        json.Number("5"),
		"info":         map[string]any{"version": "1.2.0", "tags": []any{"a", "b"}},
	})
	for src, want := range map[string]bool{
		"${tests_passed}":                         true,
		"${tests_passed} == false":                false,
		"!${tests_passed}":                        false,
		"${count} > 3":                            true,
		"${count} > 10":                           false,
		"${ count } >= 5 && ${tests_passed}":      true,
		"${info.version} == '1.2.0'":              true,
		"${info.tags[1]} == 'b'":                  true,
		"'${count}' == '${count}'":                true, // literal text inside quotes
		"${missing} == true || ${count} == 5":     true,
		"tests_passed && count < 6":               true,
		`"${info.version}" == "1.2.0"`:            false,
		"${count} > 3 AND NOT ${tests_passed}":    false,
		"${info.version} starts_with '1.'":        true,
		"length(${info.tags}) == 2":               true,
		"${info.tags} == null || ${count} != 4.0": true,
	} {
		e, err := ParseCondition(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := e.Eval(vars); got != want {
			t.Errorf("%s: got %v, want %v", src, got, want)
		}
		if e.String() != src {
			t.Errorf("String() = %q, want the source %q", e.String(), src)
		}
	}
	for _, src := range []string{"${count", "${} == 1", "${count} >"} {
		if _, err := ParseCondition(src); err == nil {
			t.Errorf("%s: no error", src)
		}
	}
}
