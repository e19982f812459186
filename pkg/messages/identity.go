package messages

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// DefaultIDField is the item field used as item id when id_field is unset.
const DefaultIDField = "id"

// ItemIdentity returns the id of the item at index: the value of its
// idField (a string, or a number as written) when the item is an object
// that has it, otherwise the decimal index.
//
// It is called twice per item of every job (counting, publishing), so it
// finds the field with a scan of the object's top level rather than by
// decoding the object into a map; what it returns is exactly what that
// decoding gives (FuzzItemIdentity checks it against the map).
func ItemIdentity(raw json.RawMessage, idField string, index int64) string {
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '{' && !jsonscan.Valid(raw) {
		return strconv.FormatInt(index, 10)
	}
	return ValidItemIdentity(raw, idField, index)
}

// ValidItemIdentity is ItemIdentity for raw known to be valid JSON, such
// as an item a reader of inputs has just checked: it does not check again.
func ValidItemIdentity(raw json.RawMessage, idField string, index int64) string {
	if idField == "" {
		idField = DefaultIDField
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		if v, ok := topLevelField(raw, idField); ok {
			if id, ok := identityValue(v); ok {
				return id
			}
		}
	}
	return strconv.FormatInt(index, 10)
}

// identityValue is an id field's value: a string, or a number as written.
func identityValue(v []byte) (string, bool) {
	if v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && isASCII(v) {
		return string(v[1 : len(v)-1]), true // nothing to unescape or replace
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), true
	}
	return "", false
}

// topLevelField returns the value of key in obj, a valid JSON object, as
// decoding it into a map would: the last of duplicate keys, keys compared
// once unescaped.
func topLevelField(obj []byte, key string) (value []byte, found bool) {
	i := jsonscan.SkipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		end := jsonscan.SkipString(obj, i)
		k := obj[i:end]
		i = jsonscan.SkipSpace(obj, end)
		i = jsonscan.SkipSpace(obj, i+1) // past ':'
		vend := jsonscan.SkipValue(obj, i)
		if keyEquals(k, key) {
			value, found = obj[i:vend], true
		}
		i = jsonscan.SkipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = jsonscan.SkipSpace(obj, i+1)
		}
	}
	return value, found
}

// keyEquals compares a quoted JSON key with key.
func keyEquals(quoted []byte, key string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 && isASCII(quoted) {
		return string(quoted[1:len(quoted)-1]) == key
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == key
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
