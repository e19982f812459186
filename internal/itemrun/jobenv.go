package itemrun

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/secret"
	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/specenv"
)

// The environment of a job's steps on this agent (docs/job-spec.md,
// "Environments"): the job's env files, env, computed values and secrets
// are resolved here, on the agent that runs the item, never on the
// coordinator; a secret's value is read from this agent's environment or
// a file under its secret directories, and masked in everything a step's
// output becomes (results, state, events, the DLQ, logs, traces), since
// all of those are made from a step's output after runShell masked it.

// envCommandTimeout bounds an env_values command.
const envCommandTimeout = time.Minute

// envCommandBytes bounds an env_values command's output.
const envCommandBytes = 64 << 10

// secretSource is what this agent lets jobs' secrets and env files read:
// the variables its SecretEnv selects (never NATS_* or FLEET_* unless
// StepEnvUnsafe) and the files under its SecretDirs.
func secretSource(cfg *Config) secret.Source {
	src := secret.Source{Env: map[string]string{}}
	for _, d := range cfg.SecretDirs {
		if abs, err := filepath.Abs(d); err == nil {
			src.Dirs = append(src.Dirs, abs)
		}
	}
	if len(cfg.SecretEnv) == 0 {
		return src
	}
	for _, kv := range cfg.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !cfg.StepEnvUnsafe && (strings.HasPrefix(k, "NATS_") || strings.HasPrefix(k, "FLEET_")) {
			continue
		}
		for _, allow := range cfg.SecretEnv {
			if allow == k || strings.HasSuffix(allow, "*") && strings.HasPrefix(k, strings.TrimSuffix(allow, "*")) {
				src.Env[k] = v
				break
			}
		}
	}
	return src
}

// stepEnviron is a step's env as NAME=value, in name order.
func stepEnviron(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// jobEnv is the job's environment on this agent; nil when the job's env
// applies as it is (no computed values, env files, secrets or sensitive
// names).
func (a *Agent) jobEnv(j *job) *specenv.Env {
	j.envOnce.Do(func() {
		if specenv.Empty(j.spec) {
			return
		}
		j.envs = specenv.NewEnv(j.spec, a.secrets, a.envCommand, func(path string) {
			a.log.Info().Str("job_id", j.id).Str("env_file", path).Msg("env file not found on this agent (or it has no --secret-dir): skipped")
		})
	})
	return j.envs
}

// itemEnv resolves the item's environment, once per delivery: its
// commands without cache run again for the next item.
func (a *Agent) itemEnv(ctx context.Context, it *item) error {
	if it.env != nil {
		return nil
	}
	envs := a.jobEnv(it.job)
	if envs == nil {
		return nil
	}
	re, err := envs.Item(ctx)
	if err != nil {
		return err
	}
	it.env, it.mask = re, secret.NewMasker(re.Mask...)
	return nil
}

// writeEnv resolves the item's environment before step i when it is a
// write_file step (a shell step resolves it in runShell): nil, or the
// step's failure.
func (a *Agent) writeEnv(ctx context.Context, it *item, i int) *retry.Failure {
	if it.set.commands[i].write == nil {
		return nil
	}
	if err := a.itemEnv(ctx, it); err != nil {
		return &retry.Failure{Err: retry.Permanent(err)}
	}
	return nil
}

// jobEnviron is the job's variables for the item's steps: env, computed
// values and secrets once resolved, else the job's env as it is.
func jobEnviron(it *item) []string {
	if it.env == nil {
		return it.job.env
	}
	return append(slices.Clip(it.env.Env), it.env.Secrets...)
}

// stepMasker masks the item's secrets and the values of c's own env
// variables whose names are sensitive.
func stepMasker(it *item, c command) *secret.Masker {
	var vals []string
	for _, kv := range c.env {
		if k, v, _ := strings.Cut(kv, "="); specenv.Sensitive(k) {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return it.mask
	}
	if it.env != nil {
		vals = append(vals, it.env.Mask...)
	}
	return secret.NewMasker(vals...)
}

// maskResult masks what a shell run's result holds of the step's output.
func maskResult(m *secret.Masker, res *shell.Result) {
	if m == nil {
		return
	}
	res.Stdout = m.MaskTail(res.Stdout, res.StdoutBytes > int64(len(res.Stdout)))
	res.Stderr = m.MaskTail(res.Stderr, res.StderrBytes > int64(len(res.Stderr)))
	if res.Err != nil {
		if s := res.Err.Error(); m.Mask(s) != s {
			res.Err = &maskedError{msg: m.Mask(s), err: res.Err}
		}
	}
}

// maskFailure masks a failure's texts; its error keeps its markers (a
// permanent error stays permanent).
func maskFailure(m *secret.Masker, f *retry.Failure) {
	if m == nil || f == nil {
		return
	}
	f.Message, f.Stderr = m.Mask(f.Message), m.Mask(f.Stderr)
	if f.Err != nil {
		if s := f.Err.Error(); m.Mask(s) != s {
			f.Err = &maskedError{msg: m.Mask(s), err: f.Err}
		}
	}
}

// maskedError is an error whose text is masked.
type maskedError struct {
	msg string
	err error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.err }

// envCommand runs an env_values command: sh -c in the agent's work
// directory, with the agent's step variables and env, bounded in time and
// output.
func (a *Agent) envCommand(ctx context.Context, command string, env []string) (string, error) {
	res := shell.Run(ctx, shell.Command{
		Script: command, Env: append(slices.Clone(a.stepEnv), env...), Dir: a.cfg.WorkDir,
		Timeout: min(a.cfg.StepTimeout, envCommandTimeout), KillGrace: a.cfg.KillGrace, TailBytes: envCommandBytes,
	})
	if res.Failed() {
		return "", res.AsError()
	}
	if res.StdoutBytes > int64(len(res.Stdout)) {
		return "", fmt.Errorf("its output is over %d bytes", envCommandBytes)
	}
	return res.Stdout, nil
}
