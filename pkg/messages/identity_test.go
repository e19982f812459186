package messages

import (
	"encoding/json"
	"testing"
)

func TestItemIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, raw, field, want string
	}{
		{"string id", `{"id": "a", "x": 1}`, "", "a"},
		{"number id as written", `{"x": 1, "id": 12345678901234567890}`, "", "12345678901234567890"},
		{"no id: index", `{"x": 1}`, "", "7"},
		{"scalar item: index", `"hello"`, "", "7"},
		{"other casing is not the id", `{"ID": "upper"}`, "", "7"},
		{"exact key wins over other casing", `{"ID": "upper", "id": "lower"}`, "", "lower"},
		{"custom field", `{"sku": "s-1", "id": "x"}`, "sku", "s-1"},
		{"nested id is not the id", `{"a": {"id": "inner"}}`, "", "7"},
		{"bool id: index", `{"id": true}`, "", "7"},
		{"field name with a quote", `{"a\"b": "q"}`, `a"b`, "q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ItemIdentity(json.RawMessage(tc.raw), tc.field, 7); got != tc.want {
				t.Fatalf("ItemIdentity(%s, %q) = %q, want %q", tc.raw, tc.field, got, tc.want)
			}
		})
	}
}

func BenchmarkItemIdentity(b *testing.B) {
	raw := json.RawMessage(`{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"}`)
	b.ReportAllocs()
	for b.Loop() {
		ItemIdentity(raw, "", 0)
	}
}
