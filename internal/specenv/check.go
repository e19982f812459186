package specenv

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// MaxEnvFiles bounds env_files; MaxCommandBytes an env command's length.
const (
	MaxEnvFiles     = 16
	MaxCommandBytes = 4096
)

// Check returns the problems of a spec's environment fields: names,
// exactly one form per computed value, conditions that parse, secret
// sources, env files, profiles and the active profile, each name set
// once across env, env_values and secrets.
func Check(s *messages.JobSpec) []messages.FieldError {
	var out []messages.FieldError
	addf := func(path, format string, args ...any) {
		out = append(out, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
	}
	name := func(p, k string) {
		if msg := NameProblem(k); msg != "" {
			addf(p, "%s", msg)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		name(messages.JoinPath("env", k), k)
	}
	for _, k := range slices.Sorted(maps.Keys(s.EnvValues)) {
		p := messages.JoinPath("env_values", k)
		v := s.EnvValues[k]
		name(p, k)
		if _, dup := s.Env[k]; dup {
			addf(p, "is set in env too: set it once")
		}
		switch {
		case v.Command != "" && v.Condition != "":
			addf(p, "set command or condition, not both")
		case v.Command != "":
			if strings.TrimSpace(v.Command) == "" {
				addf(messages.JoinPath(p, "command"), "must not be blank")
			}
			if len(v.Command) > MaxCommandBytes {
				addf(messages.JoinPath(p, "command"), "is %d bytes long, the limit is %d", len(v.Command), MaxCommandBytes)
			}
			if v.WhenTrue != "" || v.WhenFalse != "" {
				addf(p, "when_true and when_false go with condition, not command")
			}
		case v.Condition != "":
			if _, err := expr.ParseCondition(v.Condition); err != nil {
				addf(messages.JoinPath(p, "condition"), "%v", err)
			}
			if v.Cache {
				addf(messages.JoinPath(p, "cache"), "goes with command, not condition")
			}
		default:
			addf(p, "set command (its output is the value) or condition (with when_true and when_false)")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Secrets)) {
		p := messages.JoinPath("secrets", k)
		sec := s.Secrets[k]
		name(p, k)
		if _, dup := s.Env[k]; dup {
			addf(p, "is set in env too: set it once")
		}
		if _, dup := s.EnvValues[k]; dup {
			addf(p, "is set in env too: set it once")
		}
		switch sec.Provider {
		case SecretEnv:
			if !ValidName(sec.Key) {
				addf(messages.JoinPath(p, "key"), "expected the name of a variable of the agent's environment, got %q", sec.Key)
			}
		case SecretFile:
			if strings.TrimSpace(sec.Key) == "" || strings.ContainsRune(sec.Key, 0) {
				addf(messages.JoinPath(p, "key"), "expected a file path on the agent, got %q", sec.Key)
			}
		case "vault", "aws", "custom":
			addf(messages.JoinPath(p, "provider"), "%s: not supported (use env or file: the agent reads the secret from its environment or a file)", sec.Provider)
		default:
			addf(messages.JoinPath(p, "provider"), "unknown provider %q (use env or file)", sec.Provider)
		}
	}
	if len(s.EnvFiles) > MaxEnvFiles {
		addf("env_files", "has %d files, the limit is %d", len(s.EnvFiles), MaxEnvFiles)
	}
	for i, f := range s.EnvFiles {
		if strings.TrimSpace(f) == "" || strings.ContainsRune(f, 0) {
			addf(messages.IndexPath("env_files", i), "expected a file path, got %q", f)
		}
	}
	for _, pn := range slices.Sorted(maps.Keys(s.Profiles)) {
		p := messages.JoinPath("profiles", pn)
		if strings.TrimSpace(pn) == "" {
			addf(p, "a profile needs a name")
		}
		for _, k := range slices.Sorted(maps.Keys(s.Profiles[pn].Env)) {
			vp := messages.JoinPath(p, k)
			name(vp, k)
			if _, sec := s.Secrets[k]; sec {
				addf(vp, "is a secret: a profile cannot set it")
			}
		}
	}
	if s.Profile != "" {
		if _, ok := s.Profiles[s.Profile]; !ok {
			names := slices.Sorted(maps.Keys(s.Profiles))
			if len(names) == 0 {
				addf("profile", "unknown profile %q: the job defines no profiles", s.Profile)
			} else {
				addf("profile", "unknown profile %q (the job defines %s)", s.Profile, strings.Join(names, ", "))
			}
		}
	}
	check := func(field string, steps []messages.Step) {
		for i := range steps {
			for _, k := range slices.Sorted(maps.Keys(steps[i].Env)) {
				name(messages.JoinPath(messages.JoinPath(messages.IndexPath(field, i), "env"), k), k)
			}
		}
	}
	if s.Setup != nil {
		check("setup.commands", s.Setup.Commands)
	}
	check("agent_template", s.AgentTemplate)
	check("reduce", s.Reduce)
	return out
}

// Names returns every variable name the job's environment sets for its
// steps, each with its static value ("" for a value the agent computes or
// reads): what a bare ${NAME} of a command may read.
func Names(s *messages.JobSpec) map[string]string {
	out := maps.Clone(s.Env)
	if out == nil {
		out = map[string]string{}
	}
	for k := range s.EnvValues {
		out[k] = ""
	}
	for k := range s.Secrets {
		out[k] = ""
	}
	return out
}

// NameProblem says what is wrong with the name of a job's env variable,
// "" when nothing: it is a shell identifier, and not one the agent sets
// for steps itself (ITEM_*, JOB_ID, ATTEMPT, MAP_*, FAILURE_*, JETFLEET_*).
func NameProblem(name string) string {
	switch {
	case !ValidName(name):
		return "invalid variable name (letters, digits and '_', not starting with a digit)"
	case reserved(name):
		return "reserved: the agent sets ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for every shell step (MAP_* in reduce steps, FAILURE_* in a custom on_item_failure step, JETFLEET_* for itself), and a job may not change them"
	}
	return ""
}

func reserved(name string) bool {
	switch name {
	case "JOB_ID", "ATTEMPT":
		return true
	}
	for _, p := range []string{"ITEM_", "MAP_", "FAILURE_", "JETFLEET_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
