package messages

import (
	"bytes"
	"encoding/json"
	"strconv"
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
		{"escaped key", `{"\u0069d": "esc"}`, "", "esc"},
		{"last duplicate wins", `{"id": "first", "x": [1, {"id": "no"}], "id": "last"}`, "", "last"},
		{"escaped value", `{"id": "a\u00e9\"b"}`, "", "a\u00e9\"b"},
		{"null id: empty, as json.Number reads it", `{"id": null}`, "", ""},
		{"invalid JSON: index", `{"id": "a",}`, "", "7"},
		{"spaces everywhere", " {\n \"x\" : { \"a\" : \"}\" } ,\t\"id\" :\r -1.5e3 } ", "", "-1.5e3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ItemIdentity(json.RawMessage(tc.raw), tc.field, 7); got != tc.want {
				t.Fatalf("ItemIdentity(%s, %q) = %q, want %q", tc.raw, tc.field, got, tc.want)
			}
		})
	}
}

// itemIdentityByMap is ItemIdentity as it was: the object decoded into a map.
func itemIdentityByMap(raw json.RawMessage, idField string, index int64) string {
	if idField == "" {
		idField = DefaultIDField
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			if v, ok := m[idField]; ok {
				var s string
				if json.Unmarshal(v, &s) == nil {
					return s
				}
				var n json.Number
				if json.Unmarshal(v, &n) == nil {
					return n.String()
				}
			}
		}
	}
	return strconv.FormatInt(index, 10)
}

// ItemIdentity's scan gives what decoding the object into a map gives, and
// ValidItemIdentity the same on valid JSON.
func FuzzItemIdentity(f *testing.F) {
	for _, s := range []string{`{"id": "a"}`, `{"id": 1e3}`, `{"\u0069d": "x", "id": "y"}`, `{"a": {"id": 1}, "id": [1]}`,
		`{"id": "\ud800"}`, "{\"id\": \"\xff\"}", `{"id": null}`, `{"id": "a"} x`, `{"i\"d": 2}`, `{}`, `{"id":"x","id":`} {
		f.Add(s, "")
	}
	f.Add(`{"sku": "s"}`, "sku")
	f.Fuzz(func(t *testing.T, raw, field string) {
		if got, want := ItemIdentity(json.RawMessage(raw), field, 7), itemIdentityByMap(json.RawMessage(raw), field, 7); got != want {
			t.Fatalf("ItemIdentity(%q, %q) = %q, decoding into a map gives %q", raw, field, got, want)
		}
		if json.Valid([]byte(raw)) {
			if got, want := ValidItemIdentity(json.RawMessage(raw), field, 7), ItemIdentity(json.RawMessage(raw), field, 7); got != want {
				t.Fatalf("ValidItemIdentity(%q, %q) = %q, ItemIdentity %q", raw, field, got, want)
			}
		}
	})
}

func BenchmarkItemIdentity(b *testing.B) {
	raw := json.RawMessage(`{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"}`)
	b.ReportAllocs()
	for b.Loop() {
		ItemIdentity(raw, "", 0)
	}
}

func BenchmarkItemIdentityByMap(b *testing.B) {
	raw := json.RawMessage(`{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"}`)
	b.ReportAllocs()
	for b.Loop() {
		itemIdentityByMap(raw, "", 0)
	}
}
