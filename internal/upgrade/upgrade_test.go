package upgrade

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/client"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// release is a line of docs/releases.txt.
type release struct{ version, commit string }

// previousRelease is the last release in docs/releases.txt that has a
// commit (the next one is recorded with "-" until it is cut).
func previousRelease(root string) (release, error) {
	f, err := os.Open(filepath.Join(root, "docs", "releases.txt"))
	if err != nil {
		return release{}, err
	}
	defer f.Close()
	var last release
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || fields[1] == "-" {
			continue
		}
		last = release{version: fields[0], commit: fields[1]}
	}
	if err := s.Err(); err != nil {
		return release{}, err
	}
	if last.commit == "" {
		return release{}, errors.New("docs/releases.txt names no release with a commit")
	}
	return last, nil
}

// oldBinaries returns the directory holding the agent and coordinator of
// rel, building them on first use from the repository's history: the
// commit's tree (git archive, which leaves nothing behind in the
// repository if the build is interrupted) built with the module cache
// into the user cache directory, under the commit's hash, and moved into
// place only once complete.
func oldBinaries(t *testing.T, root string, rel release) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(cache, "jetfleet-upgrade", rel.commit)
	if exists(filepath.Join(dir, "agent")) && exists(filepath.Join(dir, "coordinator")) {
		return dir
	}
	if os.Getenv(buildEnv) != "1" {
		// Building takes a minute on a quiet machine, several on a busy
		// one: too long for every `go test ./...`. .ci/run builds it.
		t.Skipf("%s (%s) is not built yet in %s: run with %s=1 once (.ci/run does)", rel.version, rel.commit[:12], dir, buildEnv)
	}
	start := time.Now()
	src := t.TempDir()
	tarball := filepath.Join(t.TempDir(), "src.tar")
	out, err := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", tarball, rel.commit).CombinedOutput()
	require.NoError(t, err, "git archive %s: %s", rel.commit, out)
	out, err = exec.Command("tar", "-x", "-C", src, "-f", tarball).CombinedOutput()
	require.NoError(t, err, "tar: %s", out)

	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), rel.commit+".building-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	build := exec.Command("go", "build", "-trimpath", "-o", tmp+string(filepath.Separator), "./cmd/agent", "./cmd/coordinator")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOWORK=off")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "building %s (%s): %s", rel.version, rel.commit, out)
	if err := os.Rename(tmp, dir); err != nil && !exists(filepath.Join(dir, "agent")) {
		require.NoError(t, err) // not another test's build finishing first
	}
	t.Logf("built %s (%s) in %s into %s", rel.version, rel.commit[:12], time.Since(start).Round(time.Second), dir)
	return dir
}

// buildEnv allows the test to build the previous release when its
// binaries are not in the cache yet.
const buildEnv = "JETFLEET_UPGRADE_BUILD"

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// process is a daemon of the previous release, stopped (SIGTERM, then
// waited for) at the end of the test or by stop.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &process{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		data, _ := os.ReadFile(p.log)
		t.Errorf("%s did not stop within 30s of SIGTERM; its log:\n%s", p.cmd.Path, data)
	}
}

// inProcess runs f until the returned stop is called.
func inProcess(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	return stop
}

// items is the job both halves run: a shell step per item, retried once
// after 100ms, that fails for every tenth item (i7, i17, …), so that
// retries (the item's state in KV, a delayed nak), the job budget and
// dead letters all cross the release boundary.
const (
	items        = 40
	deadLettered = 4
)

func jobSpec(id string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"id": %q, "items": [`, id)
	for i := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		fail := "no"
		if i%10 == 7 {
			fail = "yes"
		}
		fmt.Fprintf(&b, `{"id": "i%d", "fail": %q}`, i, fail)
	}
	b.WriteString(`], "agent_template": [{"shell": "test ${item.fail} = no", "timeout": "30s",
		"retry_config": {"attempts": 2, "initial_delay": "100ms", "max_delay": "100ms"}}]}`)
	return []byte(b.String())
}

// runJob submits a job through this tree's client and checks that its
// counts are exact.
func runJob(t *testing.T, cl *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reply, err := cl.JobSubmit(ctx, jobSpec(id))
	require.NoError(t, err)
	st, err := cl.JobWait(ctx, reply.JobID, 50*time.Millisecond, nil)
	require.NoError(t, err, "job %s did not end", id)
	require.Equal(t, messages.StateFailed, st.State, "a job with dead letters fails")
	require.EqualValues(t, items, st.Items)
	require.EqualValues(t, items-deadLettered, st.Succeeded)
	require.EqualValues(t, deadLettered, st.DeadLettered)
	require.Zero(t, st.Skipped+st.NotRun+st.Failed)
	require.EqualValues(t, deadLettered, st.Retries, "one retry per failing item")
}

// A job runs with exact counts on a fleet of mixed releases, both ways:
// agents of the previous release under this tree's coordinator, then this
// tree's agents under the previous release's coordinator.
func TestMixedFleetWithThePreviousRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release (once per commit) and runs two jobs across releases")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("no git history at hand: %v", err)
	}
	root := strings.TrimSpace(string(top))
	rel, err := previousRelease(root)
	require.NoError(t, err)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", rel.commit+"^{commit}").Run(); err != nil {
		t.Skipf("the history lacks %s's commit %s (a shallow clone?)", rel.version, rel.commit)
	}
	old := oldBinaries(t, root, rel)
	t.Logf("previous release %s at %s", rel.version, rel.commit[:12])

	srv := fleettest.RunServer(t)
	cl, err := client.New(srv.Conn(), "")
	require.NoError(t, err)
	pool := messages.DefaultPool

	t.Run("old agents, new coordinator", func(t *testing.T) {
		nc := srv.Connect(t) // closed after the coordinator stops (cleanups run last first)
		stopCoord := inProcess(t, func(ctx context.Context) error {
			c, err := coordinator.New(nc, coordinator.Config{Pools: []string{pool}, LeaseTTL: 2 * time.Second,
				DLQMonitorInterval: 200 * time.Millisecond})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		})
		for i := range 2 {
			startProcess(t, filepath.Join(old, "agent"), "--server", srv.URL(), "--pool", pool,
				"--name", fmt.Sprintf("old-%d", i), "--concurrency", "4", "--log-level", "warn")
		}
		runJob(t, cl, "old-agents")
		// A step kind the previous release cannot run is refused, naming
		// the step, while only its agents are present.
		_, err := cl.JobSubmit(t.Context(), []byte(`{"items": [{"id": "x"}], "agent_template": [{"foreach": {"items": ["a"], "do": [{"shell": "true"}]}}]}`))
		var apiErr *messages.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, "agent_template[0].foreach", apiErr.Field)
		// The only agents, so the ones that ran the job, are the previous
		// release's: their presence names no build.
		waitAgents(t, srv, map[string]string{"old-0": "", "old-1": ""})
		require.Equal(t, version.Get().Semver(), coordinatorVersion(t, srv))
		stopCoord()
	})

	t.Run("new agents, old coordinator", func(t *testing.T) {
		startProcess(t, filepath.Join(old, "coordinator"), "--server", srv.URL(), "--pools", pool,
			"--lease-ttl", "2s", "--log-level", "warn")
		for i := range 2 {
			nc := srv.Connect(t)
			inProcess(t, func(ctx context.Context) error {
				return agent.New(nc, agent.Config{Pool: pool, Name: fmt.Sprintf("new-%d", i), Concurrency: 4}).Run(ctx)
			})
		}
		runJob(t, cl, "new-agents")
		waitAgents(t, srv, map[string]string{"new-0": version.Get().String(), "new-1": version.Get().String()})
		// The only coordinator is the previous release's: before v0.4.0
		// every build reported the constant 0.1.0.
		require.Equal(t, "0.1.0", coordinatorVersion(t, srv))
	})

	// The middle of a coordinator upgrade: this tree's coordinator and the
	// previous release's run at once (either may lead), beside agents of
	// both. The previous release's coordinator starts after this tree's
	// has provisioned, as one restarted during the roll does: its Ensure
	// must find every stream and bucket configured as it would have them
	// and change none (docs/contract.md §8, "Stream and bucket
	// configuration").
	t.Run("old and new coordinators side by side", func(t *testing.T) {
		nc := srv.Connect(t)
		inProcess(t, func(ctx context.Context) error {
			c, err := coordinator.New(nc, coordinator.Config{Pools: []string{pool}, LeaseTTL: 2 * time.Second,
				DLQMonitorInterval: 200 * time.Millisecond})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		})
		waitCoordinators(t, srv, 1) // its Ensure is done before it serves

		spy := srv.Connect(t)
		changes, err := spy.SubscribeSync("$JS.API.STREAM.UPDATE.>")
		require.NoError(t, err)
		creates, err := spy.SubscribeSync("$JS.API.STREAM.CREATE.>")
		require.NoError(t, err)
		require.NoError(t, spy.Flush())

		startProcess(t, filepath.Join(old, "coordinator"), "--server", srv.URL(), "--pools", pool,
			"--lease-ttl", "2s", "--log-level", "warn")
		waitCoordinators(t, srv, 2)
		startProcess(t, filepath.Join(old, "agent"), "--server", srv.URL(), "--pool", pool,
			"--name", "old-side", "--concurrency", "4", "--log-level", "warn")
		anc := srv.Connect(t)
		inProcess(t, func(ctx context.Context) error {
			return agent.New(anc, agent.Config{Pool: pool, Name: "new-side", Concurrency: 4}).Run(ctx)
		})
		runJob(t, cl, "side-by-side")

		require.NoError(t, spy.Flush())
		for _, sub := range []*nats.Subscription{changes, creates} {
			for {
				m, err := sub.NextMsg(100 * time.Millisecond)
				if err != nil {
					break
				}
				// The one stream the releases configure differently: this
				// tree's DLQ stream sources every pool's dead-letter stream,
				// which the previous release's Ensure takes away; the leader
				// puts the sources back (provision.EnsureDLQ), checked below.
				if m.Subject == "$JS.API.STREAM.UPDATE."+messages.MustNames("").DLQStream() {
					continue
				}
				t.Errorf("a coordinator changed a stream beside the other release's: %s %s", m.Subject, m.Data)
			}
		}
		names := messages.MustNames("")
		fleettest.WaitFor(t, 20*time.Second, func() error {
			s, err := srv.JS().Stream(t.Context(), names.DLQStream())
			if err != nil {
				return err
			}
			for _, src := range s.CachedInfo().Config.Sources {
				if src.Name == wire.PoolDLQStream(names, pool) {
					return nil
				}
			}
			return fmt.Errorf("the DLQ stream does not source %s: %+v", wire.PoolDLQStream(names, pool), s.CachedInfo().Config.Sources)
		})
	})
}

// waitCoordinators waits until n coordinators answer a micro ping (a
// coordinator serves once it has provisioned).
func waitCoordinators(t *testing.T, srv *fleettest.Server, n int) {
	t.Helper()
	subject, err := micro.ControlSubject(micro.PingVerb, messages.ServiceName, "")
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		inbox := nats.NewInbox()
		sub, err := srv.Conn().SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := srv.Conn().PublishRequest(subject, inbox, nil); err != nil {
			return err
		}
		ids := map[string]bool{}
		for {
			m, err := sub.NextMsg(300 * time.Millisecond)
			if err != nil {
				break
			}
			var ping micro.Ping
			if err := json.Unmarshal(m.Data, &ping); err == nil {
				ids[ping.ID] = true
			}
		}
		if len(ids) != n {
			return fmt.Errorf("%d coordinators answer, want %d", len(ids), n)
		}
		return nil
	})
}

// waitAgents waits until the agents bucket holds exactly want's agents
// with their builds (a presence is written a moment after its agent
// starts, and deleted when it stops).
func waitAgents(t *testing.T, srv *fleettest.Server, want map[string]string) {
	t.Helper()
	fleettest.WaitFor(t, 20*time.Second, func() error {
		if got := presentAgents(t, srv); !maps.Equal(got, want) {
			return fmt.Errorf("agents present: %v, want %v", got, want)
		}
		return nil
	})
}

// presentAgents maps the name of every agent in the agents bucket to the
// build its presence names.
func presentAgents(t *testing.T, srv *fleettest.Server) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := srv.JS().KeyValue(ctx, messages.MustNames("").AgentsBucket())
	require.NoError(t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		var p messages.AgentPresence
		require.NoError(t, json.Unmarshal(e.Value(), &p))
		got[p.Name] = p.Version
	}
	return got
}

// coordinatorVersion is the version in the one coordinator's micro
// service info.
func coordinatorVersion(t *testing.T, srv *fleettest.Server) string {
	t.Helper()
	subject, err := micro.ControlSubject(micro.InfoVerb, messages.ServiceName, "")
	require.NoError(t, err)
	m, err := srv.Conn().Request(subject, nil, 10*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	return info.Version
}
