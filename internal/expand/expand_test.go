package expand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// got is an Item without its raw bytes' identity, for comparisons.
type got struct {
	Index int64
	ID    string
	Group string
	Raw   string
}

func collect(t *testing.T, src *Source) []got {
	t.Helper()
	var out []got
	for it, err := range src.All() {
		require.NoError(t, err)
		out = append(out, got{it.Index, it.ID, it.Group, string(it.Raw)})
	}
	return out
}

func raws(items ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(items))
	for i, s := range items {
		out[i] = json.RawMessage(s)
	}
	return out
}

// fileSpec writes content to a file in a temp dir and returns a spec that
// reads it with jsonPath, and an opener for the dir.
func fileSpec(t *testing.T, content, jsonPath string) (*messages.JobSpec, Opener) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "items.json"), []byte(content), 0o644))
	return &messages.JobSpec{Input: "items.json", JSONPath: jsonPath}, FileOpener(dir)
}

// expand opens spec and reads all of it, returning the items before the
// first error and that error (nil at a clean end).
func expand(t *testing.T, spec *messages.JobSpec, open Opener, opts ...Option) ([]got, error) {
	t.Helper()
	src, err := Open(context.Background(), spec, open, opts...)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var out []got
	for {
		it, err := src.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, got{it.Index, it.ID, it.Group, string(it.Raw)})
	}
}

func TestInlineItems(t *testing.T) {
	spec := &messages.JobSpec{Items: raws(
		`{"id":"a","path":"x.png"}`,
		`{"id":42}`,
		`{"name":"no id"}`,
		`"scalar"`,
		`7`,
		`null`,
		`{"id":true}`,
	)}
	src, err := Open(context.Background(), spec, nil)
	require.NoError(t, err)
	require.Equal(t, []got{
		{0, "a", "", `{"id":"a","path":"x.png"}`},
		{1, "42", "", `{"id":42}`},
		{2, "2", "", `{"name":"no id"}`},
		{3, "3", "", `"scalar"`},
		{4, "4", "", `7`},
		{5, "5", "", `null`},
		{6, "6", "", `{"id":true}`}, // not a string or number: the index
	}, collect(t, src))
}

func TestIDField(t *testing.T) {
	spec := &messages.JobSpec{IDField: "key", Items: raws(`{"id":"x","key":"k1"}`, `{"key":12345678901234567890}`, `{"id":"y"}`)}
	items, err := expand(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"k1", "12345678901234567890", "2"}, ids(items))
}

func ids(items []got) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func TestFileStreamablePaths(t *testing.T) {
	const items = `[{"id":"a","n":1},{"id":"b","n":2}]`
	want := []got{{0, "a", "", `{"id":"a","n":1}`}, {1, "b", "", `{"id":"b","n":2}`}}
	tests := []struct {
		name    string
		content string
		path    string
	}{
		{"default is $[*]", items, ""},
		{"$[*]", " \n" + items + "\n\n", "$[*]"},
		{"$.items[*]", `{"items":` + items + `}`, "$.items[*]"},
		{"$.a[*] after siblings", `{"x":{"items":[1,[2,{"a":[]}]],"s":"]}"},"n":null,"t":true,"a":` + items + `,"z":[{"q":1}]}`, "$.a[*]"},
		{"$.a.b[*]", `{"a":{"c":[1,2],"b":` + items + `,"d":{}}}`, "$.a.b[*]"},
		{"bracket names", `{"a":{"b c":` + items + `}}`, `$['a']["b c"][*]`},
		{"dot wildcard", `{"a":` + items + `}`, "$.a.*"},
		{"escaped key", `{"it\u0065ms":` + items + `}`, "$.items[*]"},
		{"pretty printed", "{\n  \"items\": [\n    {\"id\":\"a\",\"n\":1},\n    {\"id\":\"b\",\"n\":2}\n  ]\n}\n", "$.items[*]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			streamed, err := CheckJSONPath(tt.path)
			require.NoError(t, err)
			require.True(t, streamed)
			spec, open := fileSpec(t, tt.content, tt.path)
			items, err := expand(t, spec, open)
			require.NoError(t, err)
			require.Equal(t, want, items)
		})
	}
}

func TestFileScalarsAndEmpty(t *testing.T) {
	spec, open := fileSpec(t, `{"items":["x", 2.50, true, null, [1,2], {"id":"o"}]}`, "$.items[*]")
	items, err := expand(t, spec, open)
	require.NoError(t, err)
	require.Equal(t, []got{
		{0, "0", "", `"x"`}, {1, "1", "", `2.50`}, {2, "2", "", `true`},
		{3, "3", "", `null`}, {4, "4", "", `[1,2]`}, {5, "o", "", `{"id":"o"}`},
	}, items)

	spec, open = fileSpec(t, `{"items":[]}`, "$.items[*]")
	total, groups, err := Count(context.Background(), spec, open)
	require.NoError(t, err)
	require.Zero(t, total)
	require.Empty(t, groups)
}

func TestFallbackPaths(t *testing.T) {
	const doc = `{"items":[
		{"id":"a","enabled":true,"n":12345678901234567890,"html":"<b>"},
		{"id":"b","enabled":false},
		{"id":"c","enabled":true,"sub":{"id":"c1"}}
	]}`
	tests := []struct {
		path string
		want []got
	}{
		{`$.items[?@.enabled==true]`, []got{
			{0, "a", "", `{"enabled":true,"html":"<b>","id":"a","n":12345678901234567890}`},
			{1, "c", "", `{"enabled":true,"id":"c","sub":{"id":"c1"}}`},
		}},
		{`$.items[?(@.enabled == false)]`, []got{{0, "b", "", `{"enabled":false,"id":"b"}`}}},
		{`$.items[1:]`, []got{
			{0, "b", "", `{"enabled":false,"id":"b"}`},
			{1, "c", "", `{"enabled":true,"id":"c","sub":{"id":"c1"}}`},
		}},
		{`$.items[0,2].id`, []got{{0, "0", "", `"a"`}, {1, "1", "", `"c"`}}},
		{`$..sub`, []got{{0, "c1", "", `{"id":"c1"}`}}},
		{`$.items[?@.missing]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			streamed, err := CheckJSONPath(tt.path)
			require.NoError(t, err)
			require.False(t, streamed)
			spec, open := fileSpec(t, doc, tt.path)
			items, err := expand(t, spec, open)
			require.NoError(t, err)
			require.Equal(t, tt.want, items)
		})
	}
}

func TestFallbackLimits(t *testing.T) {
	spec, open := fileSpec(t, `{"items":[{"id":"a"},{"id":"b"}]}`, `$.items[?@.id]`)
	_, err := Open(context.Background(), spec, open, WithMaxDocumentBytes(10))
	require.ErrorIs(t, err, ErrInputTooLarge)
	require.ErrorContains(t, err, "larger than 10 bytes")

	// Exactly at the limit is fine.
	spec, open = fileSpec(t, `[{"id":"a"}]`, `$[?@.id]`)
	items, err := expand(t, spec, open, WithMaxDocumentBytes(int64(len(`[{"id":"a"}]`))))
	require.NoError(t, err)
	require.Len(t, items, 1)

	_, err = Open(context.Background(), spec, open, WithMaxDocumentBytes(0))
	require.ErrorIs(t, err, ErrSpec)
}

func TestJSONPathErrors(t *testing.T) {
	tests := []struct {
		path    string
		wantErr string
	}{
		{`$.items`, `json_path $.items selects a single value, not a list of items; to take the elements of an array write $.items[*]`},
		{`$`, `json_path $ selects a single value`},
		{`$.items[0]`, `selects a single value`},
		{`$.items[`, `json_path $.items[: jsonpath:`},
		{`items[*]`, `json_path items[*]: jsonpath:`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			_, err := CheckJSONPath(tt.path)
			require.ErrorIs(t, err, ErrJSONPath)
			require.ErrorContains(t, err, tt.wantErr)
			spec, open := fileSpec(t, `{"items":[]}`, tt.path)
			_, err = Open(context.Background(), spec, open)
			require.ErrorIs(t, err, ErrJSONPath)
		})
	}
}

func TestPathNotFound(t *testing.T) {
	tests := []struct {
		name    string
		content string
		path    string
		want    error
		wantMsg string
	}{
		{"missing field", `{"other":[1]}`, "$.items[*]", ErrPathNotFound,
			`input items.json: json_path $.items[*]: no field "items" in the input`},
		{"missing nested field", `{"a":{"c":[]}}`, "$.a.b[*]", ErrPathNotFound,
			`input items.json: json_path $.a.b[*]: no field "b" in $.a`},
		{"parent not an object", `{"a":5}`, "$.a.b[*]", ErrPathNotFound,
			`input items.json: json_path $.a.b[*]: no field "b": $.a is a number, not an object`},
		{"root is an array", `[1,2]`, "$.items[*]", ErrPathNotFound,
			`input items.json: json_path $.items[*]: no field "items": the input is an array, not an object`},
		{"object not array", `{"items":{"a":1}}`, "$.items[*]", ErrNotArray,
			`input items.json: json_path $.items[*]: $.items is an object, not an array`},
		{"string not array", `{"items":"a,b"}`, "$.items[*]", ErrNotArray,
			`input items.json: json_path $.items[*]: $.items is a string, not an array`},
		{"root object for $[*]", `{"items":[]}`, "", ErrNotArray,
			`input items.json: json_path $[*]: the input is an object, not an array`},
		{"duplicate field", `{"items":[1],"x":2,"items":[2]}`, "$.items[*]", ErrDuplicateField,
			`input items.json: json_path $.items[*]: field "items" appears more than once in the input`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, open := fileSpec(t, tt.content, tt.path)
			_, err := expand(t, spec, open)
			require.ErrorIs(t, err, tt.want)
			require.EqualError(t, err, tt.wantMsg)
		})
	}
}

func TestMalformedJSON(t *testing.T) {
	tests := []struct {
		name    string
		content string
		path    string
		at      string // the offending text: its offset is the error's
		offset  int64  // when at is empty
		item    int64
		msg     string
		items   int // read before the error
	}{
		{name: "truncated in an item", content: `{"items":[{"id":"a"},{"id":"b"`, path: "$.items[*]",
			offset: 30, item: 1, msg: "unexpected end of input", items: 1},
		{name: "truncated after an item", content: `{"items":[{"id":"a"},`, path: "$.items[*]",
			offset: 21, item: 1, msg: "unexpected end of input", items: 1},
		{name: "truncated after the array", content: `{"items":[{"id":"a"}]`, path: "$.items[*]",
			offset: 21, item: -1, msg: "unexpected end of input", items: 1},
		{name: "truncated before the array", content: `{"x":[1,2`, path: "$.items[*]",
			offset: 9, item: -1, msg: "unexpected end of input"},
		{name: "empty", content: "", path: "$[*]", offset: 0, item: -1, msg: "empty input: no JSON value"},
		{name: "trailing garbage", content: `{"items":[1]} x`, path: "$.items[*]",
			at: "x", item: -1, msg: "invalid character 'x' looking for beginning of value", items: 1},
		{name: "trailing value", content: "[1]\n [2]", path: "$[*]",
			at: "[2]", item: -1, msg: "unexpected data after the end of the JSON document", items: 1},
		{name: "bad item", content: `{"items":[{"id":"a"},{"id" 2}]}`, path: "$.items[*]",
			at: `2}]}`, item: 1, msg: "invalid character '2' after object key", items: 1},
		{name: "not a key", content: `{{0`, path: "$.items[*]",
			at: `{0`, item: -1, msg: "invalid character '{' looking for beginning of object key string"},
		{name: "a comma for the first key", content: `{,"items":[1]}`, path: "$.items[*]",
			at: `,"items"`, item: -1, msg: "invalid character ',' looking for beginning of object key string"},
		{name: "not a key after a field", content: `{"x": 1, 2: [1]}`, path: "$.items[*]",
			at: `2:`, item: -1, msg: "invalid character '2' looking for beginning of object key string"},
		{name: "not a key after the array", content: `{"items": [1], 2: 3}`, path: "$.items[*]",
			at: `2:`, item: -1, msg: "invalid character '2' looking for beginning of object key string", items: 1},
		{name: "bad first item", content: `[{"id":"a",}]`, path: "$[*]",
			at: `}]`, item: 0, msg: "invalid character '}' looking for beginning of object key string"},
		{name: "missing comma", content: `[1 2]`, path: "$[*]",
			at: `2]`, item: 1, msg: "expected comma after array element", items: 1},
		{name: "trailing comma", content: `[1,2,]`, path: "$[*]",
			at: `]`, item: 2, msg: "invalid character ']' looking for beginning of value", items: 2},
		{name: "bad literal in a skipped field", content: `{"x": tru, "items": [1]}`, path: "$.items[*]",
			at: `, "items"`, item: -1, msg: "invalid character ',' in literal true (expecting 'e')"},
		{name: "bad nested value in a skipped field", content: `{"x": {"y": [1, "a\z"]}, "items": [1]}`, path: "$.items[*]",
			at: `z"]`, item: -1, msg: `invalid character 'z' in string escape code`},
		{name: "bad field after the array", content: `{"items":[1,2],"y":[1,}`, path: "$.items[*]",
			at: `}`, item: -1, msg: "invalid character '}' looking for beginning of value", items: 2},
		{name: "mismatched bracket", content: `{"items":[1,2}`, path: "$.items[*]",
			at: `}`, item: -1, msg: "invalid character '}' after array element", items: 2},
		{name: "fallback: bad value", content: `{"items":[{"id":"a"},{"id":x}]}`, path: "$.items[?@.id]",
			at: `x}`, item: -1, msg: "invalid character 'x' looking for beginning of value"},
		{name: "fallback: truncated", content: `{"items":[{"id":"a"}`, path: "$.items[?@.id]",
			offset: 20, item: -1, msg: "unexpected end of input"},
		{name: "fallback: trailing garbage", content: `{"items":[]} }`, path: "$.items[?@.id]",
			at: "}", item: -1, msg: "invalid character '}' looking for beginning of value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, open := fileSpec(t, tt.content, tt.path)
			items, err := expand(t, spec, open)
			require.ErrorIs(t, err, ErrMalformedJSON)
			var se *SyntaxError
			require.ErrorAs(t, err, &se)
			want := tt.offset
			if tt.at != "" {
				want = int64(strings.LastIndex(tt.content, tt.at))
			}
			require.Equal(t, want, se.Offset, "offset (error: %v)", err)
			require.Equal(t, tt.item, se.Item, "item (error: %v)", err)
			require.False(t, se.Approx)
			require.Equal(t, tt.msg, se.Msg)
			require.Len(t, items, tt.items)
			require.Equal(t, "items.json", se.Ref)
		})
	}
}

func TestMalformedJSONMessage(t *testing.T) {
	spec, open := fileSpec(t, `{"items":[{"id":"a"},{"id" 2}]}`, "$.items[*]")
	_, err := expand(t, spec, open)
	require.EqualError(t, err, `input items.json: malformed JSON at byte 27: invalid character '2' after object key (in items[1])`)
}

func TestMalformedInlineItem(t *testing.T) {
	spec := &messages.JobSpec{Items: raws(`{"id":"a"}`, `{"id":`)}
	items, err := expand(t, spec, nil)
	require.Len(t, items, 1)
	require.ErrorIs(t, err, ErrMalformedJSON)
	require.EqualError(t, err, "items[1]: inline item is not valid JSON")
	var ie *ItemError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, int64(1), ie.Index)
}

func TestGroups(t *testing.T) {
	spec := &messages.JobSpec{GroupBy: "${item.region}", Items: raws(
		`{"id":"a","region":"eu"}`, `{"id":"b","region":"us"}`, `{"id":"c","region":"eu"}`)}
	items, err := expand(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"eu", "us", "eu"}, groupsOf(items))

	total, groups, err := Count(context.Background(), spec, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), total)
	require.Equal(t, map[string]int64{"eu": 2, "us": 1}, groups)

	// No group_by: one default group "".
	spec.GroupBy = ""
	total, groups, err = Count(context.Background(), spec, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), total)
	require.Equal(t, map[string]int64{"": 3}, groups)
}

func groupsOf(items []got) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Group
	}
	return out
}

func TestGroupTemplates(t *testing.T) {
	items := raws(`{"id":"a","loc":{"region":"eu","zone":1}}`, `{"id":"b","loc":{"region":"us","zone":2}}`)
	tests := []struct {
		groupBy string
		want    []string
	}{
		{"${item.loc.region}", []string{"eu", "us"}},
		{"dc-${item.loc.region}-${item.loc.zone}", []string{"dc-eu-1", "dc-us-2"}},
		{"${ item.loc.region }", []string{"eu", "us"}},
		{"${item_id}", []string{"a", "b"}},
		{"all", []string{"all", "all"}},
		{"$${item}", []string{"${item}", "${item}"}},
	}
	for _, tt := range tests {
		t.Run(tt.groupBy, func(t *testing.T) {
			got, err := expand(t, &messages.JobSpec{GroupBy: tt.groupBy, Items: items}, nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, groupsOf(got))
		})
	}
}

func TestGroupErrors(t *testing.T) {
	spec := &messages.JobSpec{GroupBy: "${item.region}", Items: raws(`{"id":"a","region":"eu"}`, `{"id":"b"}`)}
	items, err := expand(t, spec, nil)
	require.Len(t, items, 1)
	require.ErrorIs(t, err, ErrGroup)
	require.EqualError(t, err, `items[1]: item "b": group_by "${item.region}": item has no field "region"`)
	var ie *ItemError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, ItemError{Index: 1, ID: "b", Err: ie.Err}, *ie)

	_, _, err = Count(context.Background(), spec, nil)
	require.ErrorIs(t, err, ErrGroup)

	spec = &messages.JobSpec{GroupBy: "${item.region}", Items: raws(`{"id":"a","region":""}`)}
	_, err = expand(t, spec, nil)
	require.ErrorIs(t, err, ErrGroup)
	require.EqualError(t, err, `items[0]: item "a": group_by "${item.region}" is empty for this item`)

	// A scalar item has no fields.
	spec = &messages.JobSpec{GroupBy: "${item.region}", Items: raws(`"eu"`)}
	_, err = expand(t, spec, nil)
	require.ErrorIs(t, err, ErrGroup)

	for _, groupBy := range []string{"${env.REGION}", "${job_id}", "${attempt}", "${map.total}", "${item", "${nope}"} {
		_, err := Open(context.Background(), &messages.JobSpec{GroupBy: groupBy, Items: raws(`1`)}, nil)
		require.ErrorIs(t, err, ErrSpec, groupBy)
		require.ErrorContains(t, err, "group_by", groupBy)
	}
}

func TestTooManyGroups(t *testing.T) {
	spec := &messages.JobSpec{GroupBy: "${item.r}", Items: raws(`{"r":"a"}`, `{"r":"b"}`, `{"r":"a"}`, `{"r":"c"}`)}
	_, groups, err := Count(context.Background(), spec, nil, WithMaxGroups(3))
	require.NoError(t, err)
	require.Len(t, groups, 3)
	_, _, err = Count(context.Background(), spec, nil, WithMaxGroups(2))
	require.ErrorIs(t, err, ErrTooManyGroups)
	require.EqualError(t, err, `items[3]: group "c": group_by "${item.r}" yields more than 2 groups`)
}

func TestDuplicateIDs(t *testing.T) {
	tests := []struct {
		name    string
		spec    *messages.JobSpec
		wantMsg string
	}{
		{"string ids", &messages.JobSpec{Items: raws(`{"id":"a"}`, `{"id":"b"}`, `{"id":"a"}`)},
			`items[2]: duplicate item id "a" (first at items[0])`},
		{"string and number", &messages.JobSpec{Items: raws(`{"id":"7"}`, `{"id":7}`)},
			`items[1]: duplicate item id "7" (first at items[0])`},
		{"explicit id equal to an index", &messages.JobSpec{Items: raws(`{"id":"1"}`, `{"name":"x"}`)},
			`items[1]: duplicate item id "1" (first at items[0])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := expand(t, tt.spec, nil)
			require.ErrorIs(t, err, ErrDuplicateID)
			require.EqualError(t, err, tt.wantMsg)
			_, _, err = Count(context.Background(), tt.spec, nil)
			require.ErrorIs(t, err, ErrDuplicateID)
		})
	}

	spec, open := fileSpec(t, `{"items":[{"id":"x"},{"id":"y"},{"id":"z"},{"id":"y"}]}`, "$.items[*]")
	_, _, err := Count(context.Background(), spec, open)
	require.EqualError(t, err, `items[3]: duplicate item id "y" (first at items[1])`)

	spec, open = fileSpec(t, `{"items":[{"id":"x"},{"id":"y"},{"id":"y"}]}`, "$.items[?@.id]")
	_, _, err = Count(context.Background(), spec, open)
	require.EqualError(t, err, `items[2]: duplicate item id "y" (first at items[1])`)
}

// A hash hit whose id is not among the earlier items (a collision) is
// confirmed as such by reading the items again, and does not fail.
func TestDuplicateHashCollision(t *testing.T) {
	spec, open := fileSpec(t, `[{"id":"a"},{"id":"b"},{"id":"c"}]`, "")
	opens := 0
	counting := func(ctx context.Context, ref string) (io.ReadCloser, error) {
		opens++
		return open(ctx, ref)
	}
	src, err := Open(context.Background(), spec, counting)
	require.NoError(t, err)
	src.ids.add("c") // as if "c" collided with an earlier id
	require.Equal(t, []string{"a", "b", "c"}, ids(collect(t, src)))
	require.Equal(t, 2, opens)
}

func TestEmptyIDs(t *testing.T) {
	for _, item := range []string{`{"id":""}`, `{"id":null}`} {
		_, err := expand(t, &messages.JobSpec{Items: raws(`{"id":"a"}`, item)}, nil)
		require.ErrorIs(t, err, ErrItemID, item)
		require.EqualError(t, err, `items[1]: empty item id (field "id" is an empty string or null)`)
	}
}

func TestSpecErrors(t *testing.T) {
	_, err := Open(context.Background(), &messages.JobSpec{Items: raws(`1`), Input: "x.json"}, FileOpener("."))
	require.ErrorIs(t, err, ErrSpec)
	_, err = Open(context.Background(), &messages.JobSpec{Items: raws(`1`), JSONPath: "$[*]"}, nil)
	require.ErrorIs(t, err, ErrSpec)
	_, err = Open(context.Background(), nil, nil)
	require.ErrorIs(t, err, ErrSpec)
	_, err = Open(context.Background(), &messages.JobSpec{Input: "x.json"}, nil)
	require.ErrorIs(t, err, ErrRef)

	_, err = Open(context.Background(), &messages.JobSpec{Input: "missing.json"}, FileOpener(t.TempDir()))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "input missing.json: open ")
}

func TestContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src, err := Open(ctx, &messages.JobSpec{Items: raws(`1`, `2`)}, nil)
	require.NoError(t, err)
	_, err = src.Next()
	require.NoError(t, err)
	cancel()
	_, err = src.Next()
	require.ErrorIs(t, err, context.Canceled)
	_, err = src.Next()
	require.ErrorIs(t, err, context.Canceled, "errors are sticky")

	_, err = Open(ctx, &messages.JobSpec{Items: raws(`1`)}, nil)
	require.ErrorIs(t, err, context.Canceled)
}

type closeRecorder struct {
	io.Reader
	closed int
}

func (c *closeRecorder) Close() error { c.closed++; return nil }

func TestCloseReleasesInput(t *testing.T) {
	var rcs []*closeRecorder
	open := func(_ context.Context, _ string) (io.ReadCloser, error) {
		rc := &closeRecorder{Reader: strings.NewReader(`[1,2,3]`)}
		rcs = append(rcs, rc)
		return rc, nil
	}
	spec := &messages.JobSpec{Input: "mem"}

	// Breaking out of All closes the input.
	src, err := Open(context.Background(), spec, open)
	require.NoError(t, err)
	for range src.All() {
		break
	}
	require.Equal(t, 1, rcs[0].closed)
	_, err = src.Next()
	require.Error(t, err)

	// Reading to the end closes it; Close after that is a no-op.
	src, err = Open(context.Background(), spec, open)
	require.NoError(t, err)
	require.Len(t, collect(t, src), 3)
	require.NoError(t, src.Close())
	require.Equal(t, 1, rcs[1].closed)

	// So does an error, and a path error in Open.
	_, err = Open(context.Background(), &messages.JobSpec{Input: "mem", JSONPath: "$.x[*]"}, open)
	require.ErrorIs(t, err, ErrPathNotFound)
	require.Equal(t, 1, rcs[2].closed)
}

func TestOpeners(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.json"), []byte(`[1]`), 0o644))
	ctx := context.Background()

	for _, ref := range []string{"a.json", "file://a.json"} {
		rc, err := NewOpener(dir, nil)(ctx, ref)
		require.NoError(t, err, ref)
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.Equal(t, "[1]", string(b))
		require.NoError(t, rc.Close())
	}
	// FileOpener (fleetctl validate, local) takes absolute paths as they are.
	for _, ref := range []string{filepath.Join(dir, "a.json"), "file://" + filepath.Join(dir, "a.json")} {
		rc, err := FileOpener(t.TempDir())(ctx, ref)
		require.NoError(t, err, ref)
		require.NoError(t, rc.Close())
	}
	// Without an input directory, file inputs are off.
	_, err := NewOpener("", nil)(ctx, "a.json")
	require.ErrorIs(t, err, ErrFileInputsOff)
	_, err = NewOpener(dir, nil)(ctx, "objstore://bucket/a.json")
	require.ErrorIs(t, err, ErrRef)
	_, err = NewOpener(dir, nil)(ctx, "https://example.com/a.json")
	require.ErrorIs(t, err, ErrRef)
	_, err = FileOpener(dir)(ctx, "file://")
	require.ErrorIs(t, err, ErrRef)

	for _, tt := range []struct{ ref, bucket, name string }{
		{"objstore://inputs/items.json", "inputs", "items.json"},
		{"objstore://inputs/jobs/2026/items.json", "inputs", "jobs/2026/items.json"},
	} {
		b, n, err := ParseObjectRef(tt.ref)
		require.NoError(t, err)
		require.Equal(t, tt.bucket, b)
		require.Equal(t, tt.name, n)
	}
	for _, ref := range []string{"objstore://", "objstore://bucket", "objstore://bucket/", "objstore:///name", "s3://b/n"} {
		_, _, err := ParseObjectRef(ref)
		require.ErrorIs(t, err, ErrRef, ref)
	}
}

func TestOptionErrors(t *testing.T) {
	_, _, err := Count(context.Background(), &messages.JobSpec{}, nil, WithMaxGroups(0))
	require.ErrorIs(t, err, ErrSpec)
	require.True(t, errors.Is(err, ErrSpec))
}

func TestMalformedJSONFarIntoTheInput(t *testing.T) {
	// Past several look-back windows, offsets stay exact.
	var b strings.Builder
	b.WriteString(`{"items":[`)
	pad := strings.Repeat("p", 100)
	for i := range 30_000 { // 3.6 MB: past the look-back window
		fmt.Fprintf(&b, `{"id":"item-%07d","pad":"%s"},`, i, pad)
	}
	bad := b.Len() + len(`{"id":`)
	b.WriteString(`{"id":@}]}`)
	spec, open := fileSpec(t, b.String(), "$.items[*]")
	items, err := expand(t, spec, open)
	require.Len(t, items, 30_000)
	var se *SyntaxError
	require.ErrorAs(t, err, &se)
	require.Equal(t, SyntaxError{Ref: "items.json", Offset: int64(bad), Item: 30_000,
		Msg: "invalid character '@' looking for beginning of value"}, *se)

	// Inside an item larger than the window, the error names where the item
	// starts.
	big := `[{"id":"a"},{"id":"b","pad":"` + strings.Repeat("x", 3*lookBack) + `",}]`
	spec, open = fileSpec(t, big, "")
	_, err = expand(t, spec, open)
	require.ErrorAs(t, err, &se)
	require.True(t, se.Approx)
	require.Equal(t, int64(len(`[{"id":"a"}`)), se.Offset)
	require.EqualError(t, err, `input items.json: malformed JSON in the value starting at byte 11: invalid character '}' looking for beginning of object key string (in items[1])`)
}

func TestWithoutDuplicateCheck(t *testing.T) {
	spec := &messages.JobSpec{Items: []json.RawMessage{json.RawMessage(`{"id":"a"}`), json.RawMessage(`{"id":"a"}`)}}
	src, err := Open(context.Background(), spec, nil, WithoutDuplicateCheck())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := 0; i < 2; i++ {
		if _, err := src.Next(); err != nil {
			t.Fatalf("item %d: %v (the check was meant to be skipped)", i, err)
		}
	}
	src2, _ := Open(context.Background(), spec, nil)
	defer src2.Close()
	_, _ = src2.Next()
	if _, err := src2.Next(); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("with the check, want ErrDuplicateID, got %v", err)
	}
}

// A remote submitter names files inside the input directory and nothing
// else: absolute paths, "..", and symbolic links out of it are refused
// before or without reading, and the errors are the same whether or not
// the target exists, so they reveal nothing about the filesystem.
func TestRootOpenerConfinesFiles(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "inputs")
	secret := filepath.Join(base, "secret")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	require.NoError(t, os.MkdirAll(secret, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(secret, "creds.json"), []byte(`[{"password":"hunter2"}]`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub", "ok.json"), []byte(`[1]`), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(secret, "creds.json"), filepath.Join(root, "link.json")))
	require.NoError(t, os.Symlink(filepath.Join(secret, "nope.json"), filepath.Join(root, "dangling.json")))
	open := NewOpener(root, nil)
	ctx := context.Background()

	rc, err := open(ctx, "sub/ok.json")
	require.NoError(t, err)
	require.NoError(t, rc.Close())

	for _, tt := range []struct {
		ref  string
		kind error
	}{
		{"file://../secret/creds.json", ErrRef},
		{"../secret/creds.json", ErrRef},
		{"sub/../../secret/creds.json", ErrRef},
		{"sub/../ok.json", ErrRef},
		{filepath.Join(secret, "creds.json"), ErrRef},
		{"file://" + filepath.Join(secret, "creds.json"), ErrRef},
		{"file:///etc/passwd", ErrRef},
		{"link.json", ErrFileNotFound},     // a link out of the root: refused by OpenInRoot
		{"dangling.json", ErrFileNotFound}, // the same words whether or not its target exists
		{"missing.json", ErrFileNotFound},
		{"sub", ErrFileNotFound}, // a directory
		{"file://", ErrRef},
	} {
		_, err := open(ctx, tt.ref)
		require.ErrorIs(t, err, tt.kind, tt.ref)
		require.NotContains(t, err.Error(), base, "%s: the error names the filesystem", tt.ref)
		require.NotContains(t, err.Error(), "no such file", tt.ref)
		require.NotContains(t, err.Error(), "hunter2", tt.ref)
	}
	_, errLink := open(ctx, "link.json")
	_, errDangling := open(ctx, "dangling.json")
	require.Equal(t, strings.Replace(errLink.Error(), "link.json", "X", 1), strings.Replace(errDangling.Error(), "dangling.json", "X", 1),
		"a link to an existing and to a missing file fail alike")
}
