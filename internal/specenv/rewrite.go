// Package specenv reads, checks and resolves a job's environment: its
// static env, the values an agent computes (a command's output, a
// condition's choice), its env files, its secrets and its profiles, in
// Prodigy's forms and in jetfleet's (docs/job-spec.md, "Environments").
//
// pkg/jobspec calls Rewrite on a document's tree before decoding it (the
// forms become JobSpec's EnvValues, Secrets, EnvFiles, Profiles), and
// Check on the decoded spec; the agent (internal/itemrun) calls Resolve
// when it runs a job's item. Nothing here runs on the coordinator but the
// reading of the document: commands, env files and secrets are the agent's.
package specenv

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Result is what Rewrite did to a document: notes (what each form
// became, and where each env variable comes from), warnings (accepted,
// no effect), problems, each at its path as written.
type Result struct {
	Notes, Warnings, Problems []messages.FieldError
	// Bad are paths of the tree whose problems are reported here: the
	// decoder and validator do not report them again.
	Bad []string
	// Renames map a path of the rewritten tree (From, and what is under
	// it) to the path it was written at (To).
	Renames []Rename
}

// Rename is a field moved by Rewrite.
type Rename struct{ From, To string }

func (r *Result) addf(path, format string, args ...any) {
	r.Problems = append(r.Problems, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

func (r *Result) notef(path, format string, args ...any) {
	r.Notes = append(r.Notes, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

func (r *Result) warnf(path, format string, args ...any) {
	r.Warnings = append(r.Warnings, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

// Rewrite reads the environment forms of a job spec document's tree (the
// top-level object; anything else is left alone), in place, before the
// layout rewrite and the decoder:
//
//   - env values that are objects: {command, cache} and {condition,
//     when_true, when_false} move to env_values, {secret: true, value}
//     to secrets;
//   - secrets written as "${env:NAME}" (or NAME) become {provider: env,
//     key: NAME}; {provider, key, version} keep provider and key;
//   - env_files entries {path, required} become their path;
//   - profiles, flat as Prodigy writes them ({description, NAME: value}),
//     become {description, env};
//   - profile (the document's, or the one given, which wins: fleetctl
//     --profile) applies its values over env, at once, so that what
//     follows reads them;
//   - max_parallel and agent_timeout_secs (top level, in map: or in
//     map.timeout_config) written "${NAME}" take env's value of NAME,
//     which must be a number.
func Rewrite(doc any, profile string) *Result {
	r := &Result{}
	m, ok := doc.(map[string]any)
	if !ok {
		if _, isList := doc.([]any); isList && profile != "" {
			r.addf("profile", "unknown profile %q: the job defines no profiles", profile)
		}
		return r
	}
	if profile != "" {
		if was, has := m["profile"].(string); has && was != profile {
			r.notef("profile", "%q given (--profile) instead of the document's %q", profile, was)
		}
		m["profile"] = profile
	}
	env, _ := m["env"].(map[string]any)
	origin := map[string]string{}
	for k, v := range env {
		if _, isStr := v.(string); isStr {
			origin[k] = "env"
		}
	}
	r.envObjects(m, env, origin)
	r.secrets(m, origin)
	r.envFiles(m)
	r.profiles(m, origin)
	r.numbers(m, origin)
	for _, k := range slices.Sorted(maps.Keys(origin)) {
		o, field := origin[k], "env"
		if o == "env" {
			o = "the job's env, as written (static: the same on every agent)"
		}
		if strings.HasPrefix(o, "a secret:") {
			field = "secrets"
		}
		r.notef(messages.JoinPath(field, k), "comes from %s", o)
	}
	return r
}

// envObjects moves env's object values to env_values and secrets.
func (r *Result) envObjects(m, env map[string]any, origin map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		obj, isObj := env[k].(map[string]any)
		if !isObj {
			continue
		}
		p := messages.JoinPath("env", k)
		delete(env, k)
		switch {
		case obj["secret"] != nil:
			if s, _ := obj["secret"].(bool); !s {
				val, isStr := obj["value"].(string)
				if !isStr {
					r.addf(p, "expected value to be a string, got %s", jsonnode.Describe(obj["value"]))
					continue
				}
				env[k] = val // secret: false is a plain value
				origin[k] = "env"
				continue
			}
			for f := range obj {
				if f != "secret" && f != "value" {
					r.addf(messages.JoinPath(p, f), "unknown field in a secret value (it takes secret, value)")
				}
			}
			key, ok := secretRef(obj["value"])
			if !ok {
				r.addf(messages.JoinPath(p, "value"), `expected a reference to a variable of the agent's environment ("${NAME}" or "${env:NAME}"), got %s`, jsonnode.Describe(obj["value"]))
				continue
			}
			r.put(m, "secrets", k, map[string]any{"provider": SecretEnv, "key": key})
			r.renamed(p, "secrets."+k)
			origin[k] = fmt.Sprintf("a secret (secret: true): the agent's environment variable %s, read on the agent that runs the item; masked in every output", key)
		case obj["command"] != nil || obj["condition"] != nil:
			r.put(m, "env_values", k, obj)
			r.renamed(p, "env_values."+k)
			if c, isStr := obj["command"].(string); isStr {
				origin[k] = fmt.Sprintf("computed by the command %q on the agent that runs the item (%s)", c, cacheWord(obj["cache"]))
			} else {
				origin[k] = fmt.Sprintf("computed on the agent that runs the item: when_true if %v, else when_false (over the env files', env's and the commands' values)", obj["condition"])
			}
		default:
			r.addf(p, "expected a string, {command, cache}, {condition, when_true, when_false} or {secret: true, value}, got an object with %s", strings.Join(slices.Sorted(maps.Keys(obj)), ", "))
		}
	}
}

func cacheWord(v any) string {
	if b, _ := v.(bool); b {
		return "cache: once per agent for the job"
	}
	return "once per item"
}

func (r *Result) renamed(written, at string) {
	r.Renames = append(r.Renames, Rename{From: at, To: written})
}

// put sets m[field][k] = v, making m[field] an object.
func (r *Result) put(m map[string]any, field, k string, v any) {
	obj, ok := m[field].(map[string]any)
	if !ok {
		if m[field] != nil {
			r.addf(field, "expected an object, got %s", jsonnode.Describe(m[field]))
			return
		}
		obj = map[string]any{}
		m[field] = obj
	}
	if _, dup := obj[k]; dup {
		r.addf(messages.JoinPath(field, k), "is set in env too: set it once")
		return
	}
	obj[k] = v
}

// Secret providers.
const (
	SecretEnv  = "env"
	SecretFile = "file"
)

// secretRef reads "${env:NAME}", "${NAME}", "$NAME" or "NAME".
func secretRef(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "${") && strings.HasSuffix(s, "}"):
		s = strings.TrimPrefix(s[2:len(s)-1], "env:")
		s = strings.TrimPrefix(s, "env.")
	case strings.HasPrefix(s, "$"):
		s = s[1:]
	}
	return s, ValidName(s)
}

// secrets reads the secrets' short form and Prodigy's provider form.
func (r *Result) secrets(m map[string]any, origin map[string]string) {
	sec, ok := m["secrets"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(sec)) {
		p := messages.JoinPath("secrets", k)
		switch v := sec[k].(type) {
		case string:
			key, ok := secretRef(v)
			if !ok {
				r.addf(p, `expected a variable of the agent's environment ("${env:NAME}"), got %q`, v)
				r.Bad = append(r.Bad, p)
				delete(sec, k)
				continue
			}
			sec[k] = map[string]any{"provider": SecretEnv, "key": key}
		case map[string]any:
			if v["version"] != nil {
				r.warnf(messages.JoinPath(p, "version"), "has no effect: env and file secrets have no versions")
				delete(v, "version")
			}
		default:
			continue // the decoder reports it
		}
		obj := sec[k].(map[string]any)
		if _, fromEnv := origin[k]; fromEnv {
			continue // env: {K: {secret: true}}, noted there
		}
		switch obj["provider"] {
		case SecretEnv:
			origin[k] = fmt.Sprintf("a secret: the agent's environment variable %s (allowed by its --secret-env), read on the agent that runs the item; masked in every output", obj["key"])
		case SecretFile:
			origin[k] = fmt.Sprintf("a secret: the file %s on the agent (under its --secret-dir), read on the agent that runs the item; masked in every output", obj["key"])
		}
	}
}

// envFiles reads env_files entries written {path, required}.
func (r *Result) envFiles(m map[string]any) {
	files, ok := m["env_files"].([]any)
	if !ok {
		return
	}
	for i, f := range files {
		obj, isObj := f.(map[string]any)
		if !isObj {
			continue
		}
		p := messages.IndexPath("env_files", i)
		if b, _ := obj["required"].(bool); b {
			r.warnf(messages.JoinPath(p, "required"), "has no effect: a missing env file is skipped (the agent logs it)")
		}
		for k := range obj {
			if k != "path" && k != "required" {
				r.addf(messages.JoinPath(p, k), "unknown field in an env file (it takes path, required)")
			}
		}
		files[i] = obj["path"]
	}
	r.notef("env_files", "are read by the agent that runs each item, under its --secret-dir (relative paths from the first), before env applies; a missing file is skipped")
}

// profiles reads Prodigy's flat profiles and applies the active one.
func (r *Result) profiles(m map[string]any, origin map[string]string) {
	profs, _ := m["profiles"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(profs)) {
		obj, isObj := profs[name].(map[string]any)
		if !isObj {
			continue // the decoder reports it
		}
		if _, nested := obj["env"].(map[string]any); nested {
			continue // jetfleet's own form
		}
		vars := map[string]any{}
		out := map[string]any{"env": vars}
		for k, v := range obj {
			if k == "description" {
				out[k] = v
				continue
			}
			vars[k] = v
		}
		profs[name] = out
	}
	active, isStr := m["profile"].(string)
	if !isStr || active == "" {
		return
	}
	prof, ok := profs[active].(map[string]any)
	if !ok {
		names := slices.Sorted(maps.Keys(profs))
		if len(names) == 0 {
			r.addf("profile", "unknown profile %q: the job defines no profiles", active)
		} else {
			r.addf("profile", "unknown profile %q (the job defines %s)", active, strings.Join(names, ", "))
		}
		r.Bad = append(r.Bad, "profile")
		return
	}
	vars, _ := prof["env"].(map[string]any)
	if len(vars) == 0 {
		return
	}
	env, ok := m["env"].(map[string]any)
	if !ok {
		if m["env"] != nil {
			return // the decoder reports it
		}
		env = map[string]any{}
		m["env"] = env
	}
	values, _ := m["env_values"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if _, isStr := vars[k].(string); !isStr {
			continue // the decoder reports it
		}
		env[k] = vars[k]
		delete(values, k) // the profile's value wins over a computed one
		origin[k] = fmt.Sprintf("profile %s (over the job's env)", active)
	}
}

// numberFields are the fields whose "${NAME}" takes a number from env, by
// their path in the document as written.
var numberFields = []struct {
	path    []string
	integer bool
}{
	{[]string{"max_parallel"}, true},
	{[]string{"map", "max_parallel"}, true},
	{[]string{"map", "agent_timeout_secs"}, false},
	{[]string{"map", "timeout_config", "agent_timeout_secs"}, false},
}

// numbers resolves "${NAME}" in the number fields from env.
func (r *Result) numbers(m map[string]any, origin map[string]string) {
	env, _ := m["env"].(map[string]any)
	for _, f := range numberFields {
		parent := m
		for _, k := range f.path[:len(f.path)-1] {
			parent, _ = parent[k].(map[string]any)
		}
		last := f.path[len(f.path)-1]
		s, isStr := parent[last].(string)
		if parent == nil || !isStr || !strings.HasPrefix(strings.TrimSpace(s), "$") {
			continue
		}
		p := strings.Join(f.path, ".")
		name, ok := secretRef(s)
		if !ok {
			r.addf(p, "expected a number or ${NAME} of the job's env, got %q", s)
			r.Bad = append(r.Bad, p)
			delete(parent, last)
			continue
		}
		val, isStr := env[name].(string)
		if !isStr {
			why := "the job's env does not set it"
			if o, known := origin[name]; known && o != "env" {
				why = "it is " + strings.SplitN(o, ",", 2)[0] + ", known only on the agent"
			}
			r.addf(p, "%s: %s; a number field reads a static value of env (or of the profile), when the job is submitted", s, why)
			r.Bad = append(r.Bad, p)
			delete(parent, last)
			continue
		}
		val = strings.TrimSpace(val)
		n, err := strconv.ParseFloat(val, 64)
		if err != nil || f.integer && strings.ContainsAny(val, ".eE") {
			kind := "a number"
			if f.integer {
				kind = "an integer"
			}
			r.addf(p, "%s is %q (env.%s): not %s", s, val, name, kind)
			r.Bad = append(r.Bad, p)
			delete(parent, last)
			continue
		}
		_ = n
		parent[last] = json.Number(val)
		r.notef(p, "%s: %s, from env.%s when the job is submitted", s, val, name)
	}
}

// RewriteSteps reads the environment fields of the steps of a tree
// already in jetfleet's layout (agent_template, reduce, setup.commands):
// `temporary` is dropped with a note, since a step's env applies to that
// step only. Paths are the rewritten tree's.
func RewriteSteps(doc any) *Result {
	r := &Result{}
	m, ok := doc.(map[string]any)
	if !ok {
		return r
	}
	lists := map[string]any{"agent_template": m["agent_template"], "reduce": m["reduce"]}
	if s, ok := m["setup"].(map[string]any); ok {
		lists["setup.commands"] = s["commands"]
	}
	for _, field := range slices.Sorted(maps.Keys(lists)) {
		steps, _ := lists[field].([]any)
		for i, st := range steps {
			sm, ok := st.(map[string]any)
			if !ok {
				continue
			}
			if t, has := sm["temporary"]; has {
				delete(sm, "temporary")
				p := messages.JoinPath(messages.IndexPath(field, i), "temporary")
				if _, isBool := t.(bool); !isBool {
					r.addf(p, "expected true or false, got %s", jsonnode.Describe(t))
					continue
				}
				r.notef(p, "is what jetfleet always does: a step's env applies to that step only")
			}
		}
	}
	return r
}

// ValidName reports whether s is a shell variable name.
func ValidName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
