package expand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// doc120 is a 120-byte document, 60 nested arrays, over which
// `$..*..*..*..*` selects C(59,4) = 455,126 nodes.
var doc120 = strings.Repeat("[", 60) + strings.Repeat("]", 60)

// docSmall is a document with objects, arrays and scalars.
const docSmall = `{"a":{"b":[1,2,{"c":[3,4,5,6]}],"d":{"e":[7,8,9],"f":{"g":[10,11,12,13]}}},"h":[{"i":1},{"j":[2,3]},{"k":{"l":4}}]}`

func decode(t testing.TB, s string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&v))
	return v
}

// canon encodes nodes and sorts them: descendant segments walk objects in
// map order, in the library as here.
func canon(t testing.TB, nodes []any) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		b, err := json.Marshal(n)
		require.NoError(t, err)
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}

// The bounded evaluator selects what jsonpath.Path.Select selects.
func TestSelectBoundedMatchesTheLibrary(t *testing.T) {
	doc := decode(t, docSmall)
	for _, expr := range []string{
		"$..*", "$.a.b[*]", "$..b[*]", "$..[0]", "$.h[*].j[*]", "$..*..*", "$.a..[?@ > 5]",
		"$..[?@.c]", "$.a.b[0:2]", "$['a','h']..*", "$[*,*][*]", "$..[?@.*]", "$.h[?@.j[1] == 3]",
		"$..[?count(@.*) > 1]", "$..[?length(@) == 4]", "$..[?@.i == 1]",
	} {
		t.Run(expr, func(t *testing.T) {
			q, err := parseQuery(expr)
			require.NoError(t, err)
			got, err := selectBounded(context.Background(), q, doc, 1_000_000)
			require.NoError(t, err)
			require.Equal(t, canon(t, q.path.Select(doc)), canon(t, got))
		})
	}
}

// The JSONPath library panics in match() over a node without the field:
// an error, not a dead coordinator.
func TestSelectBoundedSurvivesLibraryPanics(t *testing.T) {
	for _, expr := range []string{`$..[?match(@.x, "a")]`, `$..[?search(@.x, "a")]`} {
		q, err := parseQuery(expr)
		require.NoError(t, err)
		_, err = selectBounded(context.Background(), q, decode(t, docSmall), 1_000_000)
		require.ErrorIs(t, err, ErrJSONPath, expr)
		require.ErrorContains(t, err, "cannot be evaluated on this input")
	}
}

func TestSelectBoundedStopsAtTheBudget(t *testing.T) {
	require.Len(t, doc120, 120)
	doc := decode(t, doc120)
	q, err := parseQuery("$..*..*..*..*")
	require.NoError(t, err)
	_, err = selectBounded(context.Background(), q, doc, 100_000)
	require.ErrorIs(t, err, ErrPathTooCostly)
	require.ErrorContains(t, err, "more than 100000 nodes")
	nodes, err := selectBounded(context.Background(), q, doc, DefaultMaxPathNodes)
	require.NoError(t, err, "within the default limit")
	require.Len(t, nodes, 455_126)
	q, err = parseQuery("$..*..*..*..*..*..*")
	require.NoError(t, err)
	_, err = selectBounded(context.Background(), q, doc, DefaultMaxPathNodes)
	require.ErrorIs(t, err, ErrPathTooCostly, "C(59,6) = 45 million nodes")

	// A union multiplies nodes: counted too.
	q, err = parseQuery("$[" + strings.Repeat("*,", 200) + "*][" + strings.Repeat("*,", 200) + "*]")
	require.NoError(t, err)
	_, err = selectBounded(context.Background(), q, decode(t, docSmall), 10_000)
	require.ErrorIs(t, err, ErrPathTooCostly)

	// A filter whose query goes below each node it tests pays for the
	// subtree: 2 top-level values, each tested against all below it.
	deep := decode(t, `[`+strings.Repeat(`[`, 500)+strings.Repeat(`]`, 500)+`]`)
	q, err = parseQuery("$..[?@.*]")
	require.NoError(t, err)
	_, err = selectBounded(context.Background(), q, deep, 50_000)
	require.ErrorIs(t, err, ErrPathTooCostly, "500 levels: about 125,000 nodes below nodes")
	_, err = selectBounded(context.Background(), q, deep, 1_000_000)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q, err = parseQuery("$..*")
	require.NoError(t, err)
	big := decode(t, "["+strings.Repeat("1,", 5000)+"1]")
	_, err = selectBounded(ctx, q, big, 1_000_000)
	require.ErrorIs(t, err, context.Canceled)
}

func TestFiltersThatCannotBeBounded(t *testing.T) {
	for _, expr := range []string{"$[?@..x]", "$[?count(@..*) > 1]", "$..[?@['a','b']]", "$[?@[?@..y]]"} {
		_, err := parseQuery(expr)
		require.ErrorIs(t, err, ErrJSONPath, expr)
	}
	for _, expr := range []string{`$[?match(@.a, "x..[y,z]")]`, "$[?@.a[1:3]]", "$[?count(@.*) > 1]", "$[?@[?@.x]]"} {
		_, err := parseQuery(expr)
		require.NoError(t, err, expr)
	}
}

// Through Open and Count, with the options.
func TestPathAndItemLimits(t *testing.T) {
	spec, open := fileSpec(t, doc120, "$..*..*..*..*")
	_, _, err := Count(context.Background(), spec, open, WithMaxPathNodes(100_000))
	require.ErrorIs(t, err, ErrPathTooCostly)

	items := make([]json.RawMessage, 11)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprint(i))
	}
	_, _, err = Count(context.Background(), &messages.JobSpec{Items: items}, nil, WithMaxItems(10))
	require.ErrorIs(t, err, ErrTooManyItems)
	require.EqualError(t, err, "more than 10 items; the limit is 10 (the coordinator's --max-items)")
	n, _, err := Count(context.Background(), &messages.JobSpec{Items: items}, nil, WithMaxItems(11))
	require.NoError(t, err)
	require.EqualValues(t, 11, n)

	spec, open = fileSpec(t, `[1,2,3,4,5]`, "")
	_, _, err = Count(context.Background(), spec, open, WithMaxItems(4))
	require.ErrorIs(t, err, ErrTooManyItems, "streamed input")

	tooBig := errors.New("too big")
	_, _, err = Count(context.Background(), spec, open, WithItemCheck(func(it Item) error {
		if it.Index == 3 {
			return tooBig
		}
		return nil
	}))
	require.ErrorIs(t, err, tooBig)
	var ie *ItemError
	require.ErrorAs(t, err, &ie)
	require.EqualValues(t, 3, ie.Index)
	require.Equal(t, "3", ie.ID)
}
