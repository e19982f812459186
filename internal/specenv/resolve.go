package specenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/internal/secret"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// ErrResolve is wrapped by the errors of Env.Item: the job's environment
// cannot be made on this agent (an env file that does not read, a secret
// not there, a command that fails).
var ErrResolve = errors.New("specenv: environment")

// Runner runs an env_values command on the agent with the variables env
// (NAME=value) and returns its stdout.
type Runner func(ctx context.Context, command string, env []string) (string, error)

// Resolved is the environment of one item's steps on an agent.
type Resolved struct {
	// Env is NAME=value: the env files' variables, then env (the profile
	// applied), then env_values; a later entry wins.
	Env []string
	// Secrets is NAME=value of the job's secrets: they go after a step's
	// own env, and win over everything but the agent's item variables.
	Secrets []string
	// Mask are the values masked in a step's output: the secrets', and
	// those of variables with a sensitive name (Sensitive).
	Mask []string
}

// Env resolves a job's environment on one agent. It is safe for
// concurrent use: items of the job on the agent share it.
type Env struct {
	spec *messages.JobSpec
	src  secret.Source
	run  Runner
	// skipped is called once per env file that is not there.
	skipped func(path string)

	mu      sync.Mutex
	base    *Resolved         // env files, env and secrets, once read
	outputs map[string]string // cache: true commands' values
}

// NewEnv returns the environment of spec's items on an agent that reads
// secrets and env files from src and runs commands with run. skipped, if
// not nil, is told of each env file that is missing.
func NewEnv(spec *messages.JobSpec, src secret.Source, run Runner, skipped func(path string)) *Env {
	return &Env{spec: spec, src: src, run: run, skipped: skipped, outputs: map[string]string{}}
}

// Empty reports whether the job sets nothing that needs resolving on the
// agent (its env applies as it is).
func Empty(s *messages.JobSpec) bool {
	return len(s.EnvValues) == 0 && len(s.EnvFiles) == 0 && len(s.Secrets) == 0 && !anySensitive(s.Env)
}

func anySensitive(env map[string]string) bool {
	for k := range env {
		if Sensitive(k) {
			return true
		}
	}
	return false
}

// Item returns the environment of one item run: env files, env and
// secrets are read once for the job (a failure is tried again for the
// next item), a command with cache: true runs once, one without once per
// call, and conditions are evaluated over the variables before them.
func (e *Env) Item(ctx context.Context) (*Resolved, error) {
	base, err := e.readBase()
	if err != nil {
		return nil, err
	}
	r := &Resolved{Env: slices.Clone(base.Env), Secrets: base.Secrets, Mask: base.Mask}
	vars := map[string]string{}
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	names := slices.Sorted(maps.Keys(e.spec.EnvValues))
	for _, k := range names { // commands first: conditions may read them
		v := e.spec.EnvValues[k]
		if v.Command == "" {
			continue
		}
		out, err := e.command(ctx, k, v, r.Env)
		if err != nil {
			return nil, err
		}
		vars[k] = out
		r.Env = append(r.Env, k+"="+out)
	}
	for _, k := range names {
		v := e.spec.EnvValues[k]
		if v.Condition == "" {
			continue
		}
		c, err := expr.ParseCondition(v.Condition)
		if err != nil {
			return nil, fmt.Errorf("%w: env_values.%s.condition: %w", ErrResolve, k, err)
		}
		val := v.WhenFalse
		if c.Eval(lookupVars(vars)) {
			val = v.WhenTrue
		}
		vars[k] = val
		r.Env = append(r.Env, k+"="+val)
	}
	return r, nil
}

func (e *Env) command(ctx context.Context, name string, v messages.EnvValue, env []string) (string, error) {
	if v.Cache {
		e.mu.Lock()
		out, ok := e.outputs[name]
		e.mu.Unlock()
		if ok {
			return out, nil
		}
	}
	out, err := e.run(ctx, v.Command, env)
	if err != nil {
		return "", fmt.Errorf("%w: env.%s: the command %q: %w", ErrResolve, name, v.Command, err)
	}
	out = strings.TrimSpace(out)
	if v.Cache {
		e.mu.Lock()
		e.outputs[name] = out
		e.mu.Unlock()
	}
	return out, nil
}

// readBase reads the env files, env and secrets once.
func (e *Env) readBase() (*Resolved, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.base != nil {
		return e.base, nil
	}
	r := &Resolved{}
	for i, path := range e.spec.EnvFiles {
		data, err := e.src.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || len(e.src.Dirs) == 0 { // not here: skipped, as Prodigy skips a missing file
			if e.skipped != nil {
				e.skipped(path)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: env_files[%d]: %w", ErrResolve, i, err)
		}
		vars, err := ParseEnvFile(data)
		if err != nil {
			return nil, fmt.Errorf("%w: env_files[%d] %s: %w", ErrResolve, i, path, err)
		}
		for _, k := range slices.Sorted(maps.Keys(vars)) {
			r.Env = append(r.Env, k+"="+vars[k])
			if Sensitive(k) {
				r.Mask = append(r.Mask, vars[k])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.spec.Env)) {
		r.Env = append(r.Env, k+"="+e.spec.Env[k])
		if Sensitive(k) {
			r.Mask = append(r.Mask, e.spec.Env[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.spec.Secrets)) {
		s := e.spec.Secrets[k]
		var val string
		var err error
		switch s.Provider {
		case SecretEnv:
			val, err = e.src.Lookup(s.Key)
		case SecretFile:
			var data []byte
			data, err = e.src.ReadFile(s.Key)
			val = strings.TrimSpace(string(data))
		default:
			err = fmt.Errorf("unknown provider %q", s.Provider)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: secrets.%s: %w", ErrResolve, k, err)
		}
		r.Secrets = append(r.Secrets, k+"="+val)
		r.Mask = append(r.Mask, val)
	}
	e.base = r
	return r, nil
}

// StepMask returns the values of a step's own env to mask: those of
// sensitive names.
func StepMask(env map[string]string) []string {
	var out []string
	for k, v := range env {
		if Sensitive(k) {
			out = append(out, v)
		}
	}
	return out
}

// lookupVars reads a condition's variables: NAME or env.NAME, a string;
// anything else is missing.
func lookupVars(vars map[string]string) expr.Lookup {
	return func(p expr.Path) (any, bool) {
		if len(p) > 0 && p[0].Field == "env" {
			p = p[1:]
		}
		if len(p) != 1 || p[0].Field == "" {
			return nil, false
		}
		v, ok := vars[p[0].Field]
		return v, ok
	}
}
