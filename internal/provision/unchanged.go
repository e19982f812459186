package provision

import (
	"reflect"

	"github.com/nats-io/nats.go/jetstream"
)

// streamUnchanged reports whether a stream whose configuration is have
// already is what want asks for, so that Ensure need not update it.
//
// Every coordinator runs Ensure when it starts, and several run at once
// (docs/design.md, several coordinators): an update of an unchanged
// stream is not free — the work stream's source consumer is set up again —
// and updates overlapping other API calls tripped a data race inside the
// embedded server under -race. The rule errs towards updating: a field
// want sets must be equal in have; a field want leaves zero must be zero
// in have, or the server's "unlimited" -1; Duplicates and Metadata left
// zero are the server's to fill. Anything else is an update, as before.
func streamUnchanged(want, have jetstream.StreamConfig) bool {
	w, h := reflect.ValueOf(want), reflect.ValueOf(have)
	t := w.Type()
	for i := range t.NumField() {
		wf, hf := w.Field(i), h.Field(i)
		if !t.Field(i).IsExported() {
			continue
		}
		if !wf.IsZero() {
			if !reflect.DeepEqual(wf.Interface(), hf.Interface()) {
				return false
			}
			continue
		}
		switch t.Field(i).Name {
		case "Duplicates", "Metadata":
			continue
		}
		if hf.IsZero() {
			continue
		}
		if hf.CanInt() && hf.Int() == -1 {
			continue
		}
		return false
	}
	return true
}
