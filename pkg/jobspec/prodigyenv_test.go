package jobspec_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/specenv"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Prodigy's environment forms (testdata/prodigy/environment.yaml): values
// computed by a command or a condition, secrets in both forms and as
// env's {secret: true}, env files, flat profiles, a profile chosen at
// submission, and max_parallel from env.
func TestProdigyEnvironment(t *testing.T) {
	data := readProdigy(t, "environment.yaml")
	spec, err := jobspec.Parse(data)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"STAGE": "canary", "MAX_PARALLEL": "4"}, spec.Env)
	require.Equal(t, messages.EnvValue{Command: "getconf _NPROCESSORS_ONLN", Cache: true}, spec.EnvValues["CORES"])
	require.Equal(t, messages.EnvValue{Condition: "${STAGE} == 'stable'", WhenTrue: "release", WhenFalse: "preview"}, spec.EnvValues["CHANNEL"])
	require.Equal(t, map[string]messages.Secret{
		"REGISTRY_TOKEN": {Provider: "env", Key: "CI_REGISTRY_TOKEN"},
		"SIGNING_KEY":    {Provider: "env", Key: "CI_SIGNING_KEY"},
		"DEPLOY_CERT":    {Provider: "file", Key: "certs/deploy.pem"},
	}, spec.Secrets)
	require.Equal(t, []string{"ci.env", "ci.local.env"}, spec.EnvFiles)
	require.Equal(t, messages.Profile{Description: "the nightly build", Env: map[string]string{"STAGE": "nightly", "MAX_PARALLEL": "12"}}, spec.Profiles["nightly"])
	require.Equal(t, 4, spec.MaxParallel, "${MAX_PARALLEL} from env")
	require.Equal(t, map[string]string{"GOFLAGS": "-trimpath"}, spec.AgentTemplate[0].Env)
	require.True(t, spec.AgentTemplate[1].ClearEnv)

	// The canonical JSON reads back the same (what the coordinator parses).
	canon, err := jobspec.ToJSON(data)
	require.NoError(t, err)
	again, err := jobspec.Parse(canon)
	require.NoError(t, err)
	require.Equal(t, spec, again)

	nightly, err := specenv.Parse(data, "nightly")
	require.NoError(t, err)
	require.Equal(t, "nightly", nightly.Profile)
	require.Equal(t, map[string]string{"STAGE": "nightly", "MAX_PARALLEL": "12"}, nightly.Env)
	require.Equal(t, 12, nightly.MaxParallel, "the profile's value, at submission")
	canon, err = jobspec.ToJSON(mustJSON(t, nightly))
	require.NoError(t, err)
	again, err = jobspec.Parse(canon)
	require.NoError(t, err)
	require.Equal(t, nightly, again, "a profile applied twice is applied once")

	problems := func(data []byte, profile string) []string {
		_, err := specenv.Parse(data, profile)
		require.Error(t, err)
		var out []string
		for _, p := range validationError(t, err).Problems {
			out = append(out, p.Error())
		}
		return out
	}
	require.Equal(t, []string{`profile: unknown profile "nope" (the job defines bad, nightly)`}, problems(data, "nope"))
	require.Equal(t, []string{`map.max_parallel (line 40): ${MAX_PARALLEL} is "many" (env.MAX_PARALLEL): not an integer`}, problems(data, "bad"))
	require.Equal(t, []string{`profile: unknown profile "x": the job defines no profiles`}, problems([]byte("- shell: echo 1\n"), "x"))

	_, notes, err := jobspec.Explain(data)
	require.NoError(t, err)
	byField := map[string]string{}
	for _, n := range notes {
		byField[n.Field] = n.Message
	}
	require.Contains(t, byField["env.CORES"], `computed by the command "getconf _NPROCESSORS_ONLN" on the agent that runs the item (cache: once per agent for the job)`)
	require.Contains(t, byField["env.CHANNEL"], "computed on the agent that runs the item: when_true if")
	require.Contains(t, byField["env.STAGE"], "the job's env, as written")
	require.Contains(t, byField["env.REGISTRY_TOKEN"], "the agent's environment variable CI_REGISTRY_TOKEN")
	require.Contains(t, byField["secrets.DEPLOY_CERT"], "the file certs/deploy.pem on the agent")
	require.Contains(t, byField["map.max_parallel"], "${MAX_PARALLEL}: 4, from env.MAX_PARALLEL")
	require.Contains(t, byField["map.agent_template[0].temporary"], "a step's env applies to that step only")
	require.Contains(t, byField["env_files"], "read by the agent")
}

// map.agent_timeout_secs and timeout_config's read ${NAME} of env too.
func TestEnvironmentTimeouts(t *testing.T) {
	spec, err := jobspec.Parse([]byte("env: {T: \"90\"}\nmap:\n  input: x.json\n  agent_timeout_secs: ${T}\n  agent_template: [{shell: echo}]\n"))
	require.NoError(t, err)
	require.Equal(t, messages.Duration(90e9), spec.AgentTimeout)
	spec, err = jobspec.Parse([]byte("env: {T: \"1.5\"}\nmap:\n  input: x.json\n  timeout_config: {agent_timeout_secs: $T}\n  agent_template: [{shell: echo}]\n"))
	require.NoError(t, err)
	require.Equal(t, messages.Duration(1.5e9), spec.AgentTimeout)
}

// The environment's problems, each with its field.
func TestEnvironmentProblems(t *testing.T) {
	bad := func(yaml string) []string {
		_, err := jobspec.Parse([]byte(yaml))
		require.Error(t, err)
		var out []string
		for _, p := range validationError(t, err).Problems {
			out = append(out, p.Error())
		}
		return out
	}
	const job = "items: [a]\nagent_template: [{shell: echo}]\n"
	require.Equal(t, []string{`env.N (line 4): expected a string, {command, cache}, {condition, when_true, when_false} or {secret: true, value}, got an object with cmd`},
		bad(job+"env:\n  N: {cmd: nproc}\n"))
	cond := bad(job + "env:\n  C: {condition: \"${x} ==\", when_true: a, when_false: b}\n")
	require.Len(t, cond, 1)
	require.True(t, strings.HasPrefix(cond[0], "env.C.condition (line 4): "), cond[0])
	require.Equal(t, []string{`secrets.K.provider (line 4): vault: not supported (use env or file: the agent reads the secret from its environment or a file)`},
		bad(job+"secrets:\n  K: {provider: vault, key: x}\n"))
	require.Equal(t, []string{`secrets.K (line 4): expected a variable of the agent's environment ("${env:NAME}"), got "not a name"`},
		bad(job+"secrets:\n  K: \"not a name\"\n"))
	require.Equal(t, []string{`secrets.JOB_ID (line 4): reserved: the agent sets ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for every shell step (MAP_* in reduce steps, FAILURE_* in a custom on_item_failure step, JETFLEET_* for itself), and a job may not change them`},
		bad(job+"secrets:\n  JOB_ID: ${env:X}\n"))
	require.Equal(t, []string{`secrets.K (line 6): is set in env too: set it once`},
		bad(job+"env:\n  K: v\nsecrets:\n  K: ${env:X}\n"))
	require.Equal(t, []string{`max_parallel (line 3): ${P}: the job's env does not set it; a number field reads a static value of env (or of the profile), when the job is submitted`},
		bad(job+"max_parallel: ${P}\n"))
	require.Equal(t, []string{`max_parallel (line 3): ${P}: it is computed by the command "nproc" on the agent that runs the item (once per item), known only on the agent; a number field reads a static value of env (or of the profile), when the job is submitted`},
		bad(job+"max_parallel: ${P}\nenv:\n  P: {command: nproc}\n"))
	require.Equal(t, []string{`agent_template[0].env.ITEM_X (line 3): reserved: the agent sets ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for every shell step (MAP_* in reduce steps, FAILURE_* in a custom on_item_failure step, JETFLEET_* for itself), and a job may not change them`},
		bad("items: [a]\nagent_template:\n  - {shell: echo, env: {ITEM_X: y}}\n"))
}

// Prodigy's own environment examples validate as written, but for the
// fields of its other step kinds and merge workflows (another part of the
// work): none of their environment fields is refused.
func TestProdigyEnvironmentFiles(t *testing.T) {
	repo := os.Getenv("JETFLEET_PRODIGY_REPO")
	if repo == "" {
		repo = "/work/.mirror/iepathos+prodigy/repo"
	}
	if _, err := os.Stat(repo); err != nil {
		t.Skipf("no mirror of Prodigy's repository at %s", repo)
	}
	for _, name := range []string{"workflows/environment-example.yml", "workflows/mapreduce-env-example.yml", "examples/test-sensitive-masking.yml",
		"workflows/book-docs-drift.yml", "workflows/mkdocs-drift.yml"} {
		data, err := exec.Command("git", "-C", repo, "show", "HEAD:"+name).Output()
		require.NoError(t, err, name)
		_, err = jobspec.Parse(data)
		if err == nil {
			continue
		}
		for _, p := range validationError(t, err).Problems {
			envish := strings.Contains(p.Field, "env") || strings.Contains(p.Field, "secret") || strings.Contains(p.Field, "profile") ||
				strings.HasSuffix(p.Field, "max_parallel") || strings.HasSuffix(p.Field, "temporary")
			require.False(t, envish, "%s: %s", name, p.Error())
			t.Logf("%s: left to the other step kinds' work: %s", name, p.Error())
		}
	}
}

func mustJSON(t *testing.T, spec *messages.JobSpec) []byte {
	t.Helper()
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	return data
}
