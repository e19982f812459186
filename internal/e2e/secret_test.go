package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

// lockedBuffer is a log sink shared by the fleet's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// A job's secrets, one from the agent's environment and one from a file
// under its --secret-dir, reach its steps on the agent, and the steps
// print them on stdout and stderr, capture them, fail with them in their
// error (a dead letter) and print them in reduce: neither value is in
// any byte of the server's store, in any message of any stream, in the
// logs of the coordinator and the agents (debug level) or in any span.
// The computed env values (a command's, a condition's) are resolved on
// the agent, and a variable with a sensitive name is masked in outputs.
func TestSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	const (
		envSecret  = "tok-5f3a9c1e-ENVSECRET"
		fileSecret = "file-8d1e77b2-FILESECRET"
		marker     = "VISIBLE-MARKER-41c7"
	)
	secretDir, storeDir := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(secretDir, "token.txt"), []byte(fileSecret+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(secretDir, "job.env"), []byte("# shared settings\nREGION='eu-west'\n"), 0o600))

	logs := &lockedBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	environ := func() []string {
		return []string{"PATH=" + os.Getenv("PATH"), "JF_E2E_TOKEN=" + envSecret, "JF_NOT_ALLOWED=x"}
	}
	f := fleettest.RunFleet(t, nil,
		fleettest.WithAgents(2),
		fleettest.WithLogger(log),
		fleettest.WithServerOptions(fleettest.WithStoreDir(storeDir)),
		fleettest.WithCoordinatorConfig(func(c *coordinator.Config) {
			c.TracerProvider = tp
			c.Provision = coordinator.Provision(calmProvision)
		}),
		fleettest.WithAgentConfig(func(_ int, c *agent.Config) {
			c.TracerProvider, c.Environ = tp, environ
			c.SecretEnv, c.SecretDirs = []string{"JF_E2E_*"}, []string{secretDir}
			c.WorkDir = t.TempDir()
		}),
	)

	spec, err := jobspec.Parse([]byte(`
id: secrets
setup:
  - shell: 'printf "[{\"id\": \"a\"}, {\"id\": \"b\", \"note\": \"%s\"}]" "$TOKEN" > items.json'
input: items.json
env_files: [job.env, missing.env]
env:
  WORKERS: {command: "echo 3", cache: true}
  MODE: {condition: "${WORKERS} == '3'", when_true: fast, when_false: slow}
  DB_PASSWORD: "pw-4471-visible-in-spec"
secrets:
  TOKEN: "${env:JF_E2E_TOKEN}"
  FILE_TOKEN: {provider: file, key: token.txt}
agent_template:
  - shell: 'echo "token=$TOKEN file=$FILE_TOKEN mode=$MODE workers=$WORKERS region=$REGION pw=$DB_PASSWORD ` + marker + `"; echo "stderr $TOKEN" >&2'
    capture: out
    capture_streams: {stderr: true}
  - shell: 'echo "again ${out} ${TOKEN} steptoken=$STEP_AUTH_TOKEN"; echo "failing with $TOKEN $FILE_TOKEN" >&2; [ "${item.id}" = a ] || exit 3'
    env:
      STEP_AUTH_TOKEN: "step-tok-9e21"
    retry_config: {attempts: 2, initial_delay: 10ms}
reduce:
  - shell: 'echo "reduce $TOKEN $FILE_TOKEN ` + marker + `"'
`))
	require.NoError(t, err)
	require.NotContains(t, fmt.Sprint(spec), envSecret, "only the secrets' sources travel with the job")
	st := f.Run(t, spec, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all bytes.Buffer // every message of every stream, headers and data
	streams := f.Server.JS().ListStreams(ctx)
	for info := range streams.Info() {
		s, err := f.Server.JS().Stream(ctx, info.Config.Name)
		require.NoError(t, err)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			require.NoError(t, err, "stream %s seq %d", info.Config.Name, seq)
			fmt.Fprintf(&all, "%s %v %s\n", m.Subject, m.Header, m.Data)
		}
	}
	require.NoError(t, streams.Err())
	msgs := all.String()
	// What the steps printed is there, masked: the grep reads outputs.
	require.Contains(t, msgs, "token=*** file=*** mode=fast workers=3 region=eu-west pw=*** "+marker)
	require.Contains(t, msgs, `failing with *** ***`, "the dead letter's error")
	require.Contains(t, msgs, "reduce *** *** "+marker)
	require.Contains(t, msgs, `\"note\": \"***\"`, "the input the setup left, masked")

	var spans strings.Builder
	for _, s := range rec.Ended() {
		fmt.Fprintf(&spans, "%s %v %v\n", s.Name(), s.Attributes(), s.Status())
		for _, e := range s.Events() {
			fmt.Fprintf(&spans, "  %s %v\n", e.Name, e.Attributes)
		}
	}
	require.NotEmpty(t, rec.Ended())

	var store bytes.Buffer
	require.NoError(t, filepath.WalkDir(storeDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			var data []byte
			data, err = os.ReadFile(path)
			store.Write(data)
		}
		// The server is running: a file it replaced between the listing and
		// the read (a consumer's o.dat.tmp renamed into place) is read under
		// its new name.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}))
	require.Contains(t, store.String(), marker, "the store's files hold the steps' output")

	require.Contains(t, msgs, "steptoken=***", "a step's env variable with a sensitive name is masked")
	require.NotContains(t, msgs, "steptoken=step-tok")
	for _, leak := range []string{envSecret, fileSecret} {
		require.NotContains(t, store.String(), leak, "a secret in the server's store")
		require.NotContains(t, msgs, leak, "a secret in a stream's message")
		require.NotContains(t, string(logs.Bytes()), leak, "a secret in the logs")
		require.NotContains(t, spans.String(), leak, "a secret in a span")
	}
	require.NotContains(t, msgs, "pw=pw-4471", "a sensitive name's value in an output")
	require.Contains(t, string(logs.Bytes()), "missing.env", "a missing env file is logged and skipped")
}

// The API's profile field: the coordinator applies the named profile over
// env when it reads the submission (max_parallel's ${PAR} among them), and
// refuses an unknown one, naming it.
func TestProfileThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := fleettest.RunFleet(t, nil, fleettest.WithCoordinatorConfig(func(c *coordinator.Config) {
		c.Provision = coordinator.Provision(calmProvision)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := func(profile string) []byte {
		return []byte(`{"id": "profile-` + profile + `", "profile": "` + profile + `", "items": [{"id": "a"}],
			"env": {"MODE": "plain", "PAR": "1"}, "max_parallel": "${PAR}",
			"profiles": {"dev": {"description": "local", "MODE": "dev-mode", "PAR": "3"}},
			"agent_template": [{"shell": "test \"$MODE\" = dev-mode", "retry_config": {"attempts": 1}}]}`)
	}
	reply, err := f.Client.JobSubmit(ctx, spec("dev"))
	require.NoError(t, err)
	st, err := f.Client.JobWait(ctx, reply.JobID, 0, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)

	_, err = f.Client.JobSubmit(ctx, spec("prod"))
	require.ErrorContains(t, err, `unknown profile "prod" (the job defines dev)`)
}
