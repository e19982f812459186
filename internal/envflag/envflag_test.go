package envflag

import "testing"

func TestDefaults(t *testing.T) {
	env := map[string]string{"S": "x", "N": "42", "BAD": "4x"}
	get := func(k string) string { return env[k] }
	if got := String(get, "S", "d"); got != "x" {
		t.Fatalf("String set = %q", got)
	}
	if got := String(get, "MISSING", "d"); got != "d" {
		t.Fatalf("String unset = %q", got)
	}
	if got := Int(get, "N", 1); got != 42 {
		t.Fatalf("Int set = %d", got)
	}
	if got := Int(get, "BAD", 1); got != 1 {
		t.Fatalf("Int not a number = %d", got)
	}
}
