package shell

import (
	"fmt"
	"slices"
	"strings"
)

// DefaultStepEnv are the variables of the agent's environment that a step
// sees by default: what programs need to find themselves, their home, their
// language and time zone. Nothing else of the agent's environment reaches a
// step unless the operator allows it ([NewEnvFilter]).
var DefaultStepEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR"}

// ReservedEnvPrefixes name the agent's own settings and credentials
// (NATS_URL, NATS_CREDS, NATS_NKEY, NATS_PASSWORD, FLEET_*) and its
// internal variables (JETFLEET_*): an [EnvFilter] never passes them to a
// step unless built with passReserved.
var ReservedEnvPrefixes = []string{"NATS_", "FLEET_", "JETFLEET_"}

// EnvFilter selects the variables of the agent's environment that a step
// sees: [DefaultStepEnv] and the operator's additions, never a reserved
// one ([ReservedEnvPrefixes]) unless allowed deliberately. An EnvFilter is
// immutable and safe for concurrent use.
type EnvFilter struct {
	names        map[string]bool
	prefixes     []string
	passReserved bool
}

// NewEnvFilter returns the filter passing DefaultStepEnv and extra: each
// entry a variable name (AWS_REGION) or a prefix ending in "*" (AWS_*; "*"
// alone passes every variable). An entry that is not a name, or that names
// reserved variables (NATS_URL, FLEET_*), is an error wrapping ErrStepEnv,
// unless passReserved is set: then the reserved variables extra names pass
// too. A broader prefix (N*, *) is allowed but never passes a reserved
// variable without passReserved.
func NewEnvFilter(extra []string, passReserved bool) (*EnvFilter, error) {
	f := &EnvFilter{names: map[string]bool{}, passReserved: passReserved}
	var errs []string
	for _, e := range append(append([]string(nil), DefaultStepEnv...), extra...) {
		name, prefix := strings.CutSuffix(strings.TrimSpace(e), "*")
		if name != "" && !validName(name) || !prefix && name == "" {
			errs = append(errs, fmt.Sprintf("%q is not a variable name or a prefix ending in *", e))
			continue
		}
		if r := reservedPrefix(name); r != "" && !passReserved {
			errs = append(errs, fmt.Sprintf("%s: the agent's %s* variables hold its NATS credentials and settings and are never passed to steps (set the unsafe override to pass them anyway)", strings.TrimSpace(e), r))
			continue
		}
		if prefix {
			f.prefixes = append(f.prefixes, name)
		} else {
			f.names[name] = true
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrStepEnv, strings.Join(errs, "; "))
	}
	return f, nil
}

// Filter returns the entries of environ (NAME=value strings, as
// os.Environ) that a step may see, sorted by name.
func (f *EnvFilter) Filter(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && name != "" && f.Allows(name) {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

// Allows reports whether a step may see the agent's variable name.
func (f *EnvFilter) Allows(name string) bool {
	if !f.passReserved && reservedPrefix(name) != "" {
		return false
	}
	if f.names[name] {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func reservedPrefix(name string) string {
	for _, p := range ReservedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return p
		}
	}
	return ""
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}
