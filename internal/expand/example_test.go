package expand_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func ExampleOpen() {
	spec := &messages.JobSpec{
		Input:    "items.json",
		JSONPath: "$.items[*]",
		GroupBy:  "${item.region}",
	}
	// A stand-in for expand.FileOpener(dir) or expand.NewOpener(dir, js).
	open := func(_ context.Context, ref string) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(`{"items": [
			{"id": "a", "region": "eu"},
			{"id": 7, "region": "us"},
			{"region": "eu"}
		]}`)), nil
	}
	ctx := context.Background()

	total, groups, err := expand.Count(ctx, spec, open)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(total, groups)

	src, err := expand.Open(ctx, spec, open)
	if err != nil {
		fmt.Println(err)
		return
	}
	for it, err := range src.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d %s %s %s\n", it.Index, it.ID, it.Group, it.Raw)
	}
	// Output:
	// 3 map[eu:2 us:1]
	// 0 a eu {"id": "a", "region": "eu"}
	// 1 7 us {"id": 7, "region": "us"}
	// 2 2 eu {"region": "eu"}
}

func ExampleCount_duplicate() {
	spec := &messages.JobSpec{Items: []json.RawMessage{
		json.RawMessage(`{"id": "a"}`), json.RawMessage(`{"id": "b"}`), json.RawMessage(`{"id": "a"}`),
	}}
	_, _, err := expand.Count(context.Background(), spec, nil)
	fmt.Println(err)
	// Output:
	// items[2]: duplicate item id "a" (first at items[0])
}
