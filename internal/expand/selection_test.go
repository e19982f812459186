package expand

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func intPtr(n int) *int { return &n }

// Item selection against worked examples: Prodigy's own (its data
// pipeline's tests and the filtering-and-sorting documentation) and the
// combinations its order implies (filter, sort_by, distinct, offset,
// max_items).
func TestSelection(t *testing.T) {
	priorities := `{"items": [{"id": 1, "priority": 5}, {"id": 2, "priority": 2}, {"id": 3, "priority": 8}, {"id": 4, "priority": 4}]}`
	findings := `[
		{"id": "f1", "file": "a.rs", "severity": "high", "score": 7, "tags": ["ui"]},
		{"id": "f2", "file": "b.go", "severity": "low", "score": 9},
		{"id": "f3", "file": "a.rs", "severity": "critical", "score": 3, "tags": []},
		{"id": "f4", "file": "c.rs", "severity": "high", "score": null},
		{"id": "f5", "file": "d.rs", "severity": "critical", "score": 7},
		{"id": "f6", "file": "b.go", "severity": "high", "score": 12, "tags": ["api", "ui"]}
	]`
	tests := []struct {
		name, input, jsonPath string
		spec                  messages.JobSpec
		want                  string // ids in order
	}{
		{"Prodigy's pipeline test: filter, sort DESC, max_items", priorities, "$.items[*]",
			messages.JobSpec{Filter: "priority > 3", SortBy: "priority DESC", MaxItems: intPtr(2)}, "3 1"},
		{"Prodigy's distinct example: the first of each id", `[{"id": 1, "value": "a"}, {"id": 2, "value": "b"}, {"id": 1, "value": "c"}, {"id": 3, "value": "d"}]`, "",
			messages.JobSpec{Distinct: "id", IDField: "value"}, "a b d"},
		{"or of equalities", findings, "", messages.JobSpec{Filter: "severity == 'high' || severity == 'critical'"}, "f1 f3 f4 f5 f6"},
		{"in", findings, "", messages.JobSpec{Filter: "severity in ['high', 'critical'] AND score >= 7"}, "f1 f5 f6"},
		{"type test and regex", findings, "", messages.JobSpec{Filter: `is_number(score) && file matches '\.rs$'`}, "f1 f3 f5"},
		{"null score", findings, "", messages.JobSpec{Filter: "is_null(score)"}, "f4"},
		{"length and index", findings, "", messages.JobSpec{Filter: "length(tags) >= 1 && tags[0] == 'ui'"}, "f1"},
		{"sort with nulls last, then by id", findings, "", messages.JobSpec{SortBy: "score DESC, id"}, "f6 f2 f1 f5 f3 f4"},
		{"sort with nulls first", findings, "", messages.JobSpec{SortBy: "score DESC NULLS FIRST"}, "f4 f6 f2 f1 f5 f3"},
		{"two keys, stable", findings, "", messages.JobSpec{SortBy: "severity ASC, score DESC"}, "f5 f3 f6 f1 f4 f2"},
		{"distinct after sort keeps the first in sorted order", findings, "", messages.JobSpec{SortBy: "score DESC", Distinct: "file"}, "f6 f1 f5 f4"},
		{"offset and max_items after distinct", findings, "", messages.JobSpec{SortBy: "score DESC", Distinct: "file", Offset: 1, MaxItems: intPtr(2)}, "f1 f5"},
		{"all five", findings, "", messages.JobSpec{Filter: "severity != 'low'", SortBy: "score DESC NULLS LAST", Distinct: "file", Offset: 1, MaxItems: intPtr(2)}, "f1 f5"},
		{"offset beyond the end", findings, "", messages.JobSpec{Offset: 10}, ""},
		{"a streamed input: offset and max_items only", findings, "", messages.JobSpec{Offset: 2, MaxItems: intPtr(3)}, "f3 f4 f5"},
		{"distinct of a missing field keeps one", findings, "", messages.JobSpec{Distinct: "owner"}, "f1"},
		{"ids by index count the selected items", `[{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]`, "", messages.JobSpec{Filter: "n > 2"}, "0 1"},
		{"a non-streamed json_path", `{"a": [{"id": "x", "k": 2}, {"id": "y", "k": 1}]}`, "$..a[*]", messages.JobSpec{SortBy: "k"}, "y x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jp := tt.jsonPath
			if jp == "" {
				jp = "$[*]"
			}
			spec, open := fileSpec(t, tt.input, jp)
			spec.Filter, spec.SortBy, spec.Distinct, spec.Offset, spec.MaxItems, spec.IDField =
				tt.spec.Filter, tt.spec.SortBy, tt.spec.Distinct, tt.spec.Offset, tt.spec.MaxItems, tt.spec.IDField
			items, err := expand(t, spec, open)
			require.NoError(t, err)
			require.Equal(t, tt.want, strings.Join(ids(items), " "))
			n, _, err := Count(context.Background(), spec, open)
			require.NoError(t, err)
			require.EqualValues(t, len(items), n, "Count and Open agree")
		})
	}
	t.Run("inline items", func(t *testing.T) {
		spec := &messages.JobSpec{Items: raws(`{"id": "a", "n": 2}`, `{"id": "b", "n": 1}`, `{"id": "c", "n": 3}`), Filter: "n >= 2", SortBy: "n DESC"}
		items, err := expand(t, spec, nil)
		require.NoError(t, err)
		require.Equal(t, "c a", strings.Join(ids(items), " "))
	})
}

func TestSelectionErrors(t *testing.T) {
	spec, open := fileSpec(t, `[{"id": 1}]`, "$[*]")
	spec.Filter = "id >"
	_, err := Open(context.Background(), spec, open)
	require.ErrorIs(t, err, ErrSelection)
	require.ErrorContains(t, err, "filter:")

	spec.Filter, spec.SortBy = "", "id sideways"
	_, err = Open(context.Background(), spec, open)
	require.ErrorIs(t, err, ErrSelection)
}

// sort_by holds the selected items in memory, within a bound; beyond it
// the job is refused with what to do, and without sort_by the same input
// streams.
func TestSortBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id": "item-%04d", "n": %d, "pad": "%s"}`, i, i%7, strings.Repeat("x", 100))
	}
	b.WriteString("]")
	spec, open := fileSpec(t, b.String(), "$[*]")
	spec.SortBy = "n"
	_, _, err := Count(context.Background(), spec, open, WithMaxSortBytes(50_000))
	require.ErrorIs(t, err, ErrSortTooLarge)
	require.ErrorContains(t, err, "sort the input before submitting")

	spec.Filter = "n == 3" // fewer items kept: within the bound
	n, _, err := Count(context.Background(), spec, open, WithMaxSortBytes(50_000))
	require.NoError(t, err)
	require.EqualValues(t, 143, n)

	spec.SortBy, spec.Filter = "", ""
	n, _, err = Count(context.Background(), spec, open, WithMaxSortBytes(50_000))
	require.NoError(t, err)
	require.EqualValues(t, 1000, n)
}
