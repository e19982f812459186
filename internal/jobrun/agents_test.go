package jobrun

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// presenceEntry is a watched entry of the agents bucket.
type presenceEntry struct {
	key     string
	value   []byte
	op      jetstream.KeyValueOp
	created time.Time
}

func (e presenceEntry) Bucket() string                  { return "fleet_agents" }
func (e presenceEntry) Key() string                     { return e.key }
func (e presenceEntry) Value() []byte                   { return e.value }
func (e presenceEntry) Revision() uint64                { return 1 }
func (e presenceEntry) Created() time.Time              { return e.created }
func (e presenceEntry) Delta() uint64                   { return 0 }
func (e presenceEntry) Operation() jetstream.KeyValueOp { return e.op }

func put(pool, name string, handlers ...string) presenceEntry {
	b, _ := json.Marshal(messages.AgentPresence{Name: name, Pool: pool, Handlers: handlers})
	return presenceEntry{key: wire.AgentKey(pool, name), value: b, op: jetstream.KeyValuePut}
}

func TestHandlerProblemsFollowThePresentAgents(t *testing.T) {
	t.Parallel()
	d := newAgentDirectory()
	c := &Coordinator{agents: d}
	spec := &messages.JobSpec{
		AgentTemplate: []messages.Step{{Shell: "true"}, {Handler: "upload"}},
		Reduce:        []messages.Step{{Handler: "merge"}},
		ErrorPolicy:   &messages.ErrorPolicy{OnItemFailure: &messages.ItemFailureAction{Action: messages.ItemFailureCustom, Custom: &messages.Step{Handler: "alert"}}},
	}
	fields := func() []string {
		var fs []string
		for _, p := range c.handlerProblems(context.Background(), spec) {
			fs = append(fs, p.Field)
		}
		return fs
	}
	// No agent of the pool: anything goes (and no bucket to read).
	require.Empty(t, fields())

	d.apply(put("default", "a1", "upload"))
	d.apply(put("other", "b1", "merge", "alert"))
	require.Equal(t, []string{"reduce[0].handler", "error_policy.on_item_failure.custom.handler"}, fields())
	p := c.handlerProblems(context.Background(), spec)[0]
	require.Equal(t, `reduce[0].handler: no agent of pool "default" registers handler "merge"`, p.Error())

	// One agent of the pool with the handler is enough.
	d.apply(put("default", "a2", "merge", "alert"))
	require.Empty(t, fields())

	// A stopped agent no longer counts; the last one gone leaves the pool
	// open again.
	d.apply(presenceEntry{key: wire.AgentKey("default", "a2"), op: jetstream.KeyValueDelete})
	require.Equal(t, []string{"reduce[0].handler", "error_policy.on_item_failure.custom.handler"}, fields())
	d.apply(presenceEntry{key: wire.AgentKey("default", "a1"), op: jetstream.KeyValuePurge})
	require.Empty(t, fields())

	// The spec's pool is the one checked.
	spec.Pool = "other"
	require.Equal(t, []string{"agent_template[1].handler"}, fields())
}

// An agent is unreachable once the hub has stored no presence of it for
// UnreachableAfter of its intervals; a stopping agent is not listed, nor
// one of another pool. The longest silent comes first.
func TestUnreachableAgents(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	d := newAgentDirectory()
	at := func(pool, name string, interval, ago time.Duration, stopping bool) presenceEntry {
		b, _ := json.Marshal(messages.AgentPresence{Name: name, Pool: pool, Interval: messages.Duration(interval), Stopping: stopping})
		return presenceEntry{key: wire.AgentKey(pool, name), value: b, op: jetstream.KeyValuePut, created: now.Add(-ago)}
	}
	d.apply(at("site-b", "fresh", 5*time.Second, 15*time.Second, false)) // exactly 3 intervals: still reachable
	d.apply(at("site-b", "b1", 5*time.Second, 16*time.Second, false))
	d.apply(at("site-b", "b2", 5*time.Second, time.Minute, false))
	d.apply(at("site-b", "leaving", 5*time.Second, time.Minute, true))
	d.apply(at("site-b", "never", -1, time.Hour, false)) // writes no presence
	d.apply(at("default", "a1", 5*time.Second, time.Hour, false))
	require.Equal(t, []messages.UnreachableAgent{
		{Name: "b2", Since: now.Add(-time.Minute)},
		{Name: "b1", Since: now.Add(-16 * time.Second)},
	}, d.unreachable("site-b", now))
	require.Empty(t, d.unreachable("gpu", now))
}

// A claude step needs an agent of the pool that announces the claude
// capability (Claude Code's CLI).
func TestClaudeStepsFollowTheAgentsCapabilities(t *testing.T) {
	t.Parallel()
	d := newAgentDirectory()
	c := &Coordinator{agents: d}
	spec := &messages.JobSpec{AgentTemplate: []messages.Step{{Shell: "true"}, {Claude: "/fix ${item.path}"}}}
	require.Empty(t, c.handlerProblems(context.Background(), spec), "no agent yet: the job waits for one")

	d.apply(put("default", "a1"))
	ps := c.handlerProblems(context.Background(), spec)
	require.Len(t, ps, 1)
	require.Equal(t, "agent_template[1].claude", ps[0].Field)

	b, _ := json.Marshal(messages.AgentPresence{Name: "a2", Pool: "default", Capabilities: []string{messages.CapabilityClaude}})
	d.apply(presenceEntry{key: wire.AgentKey("default", "a2"), value: b, op: jetstream.KeyValuePut})
	require.Empty(t, c.handlerProblems(context.Background(), spec))
}

// A step kind an agent announces (write_file, foreach, handlers) needs an
// agent of the pool that does: a pool of agents before v0.4.0, which
// announce none, refuses such a job with the field, nested steps included.
func TestStepKindsFollowTheAgentsCapabilities(t *testing.T) {
	t.Parallel()
	d := newAgentDirectory()
	c := &Coordinator{agents: d}
	spec := &messages.JobSpec{AgentTemplate: []messages.Step{
		{Shell: "true"},
		{Foreach: &messages.Foreach{Items: []string{"a"}, Do: []messages.Step{{WriteFile: &messages.WriteFile{Path: "x", Content: "y"}}}}},
		{Shell: "false", OnExitCode: map[string]messages.Step{"1": {Shell: "true"}}},
		{Shell: "false", RetryConfig: &messages.RetryConfig{OnFailure: &messages.OnFailure{Action: messages.OnFailureFallback, Fallback: "true", FailWorkflow: true}}},
	}}
	d.apply(put("default", "old")) // a presence with no capabilities, as v0.3.0's
	var fields []string
	for _, p := range c.handlerProblems(context.Background(), spec) {
		fields = append(fields, p.Field)
		require.Contains(t, p.Message, "agents before v0.4.0 do not")
	}
	require.Equal(t, []string{"agent_template[1].foreach", "agent_template[1].foreach.do[0].write_file",
		"agent_template[2].on_exit_code", "agent_template[3].retry_config.on_failure.fallback.fail_workflow"}, fields)
	require.Empty(t, c.handlerProblems(context.Background(), &messages.JobSpec{AgentTemplate: []messages.Step{{Shell: "true"}}}),
		"an ordinary job runs on old agents")

	b, _ := json.Marshal(messages.AgentPresence{Name: "new", Pool: "default",
		Capabilities: []string{messages.CapabilityForeach, messages.CapabilityHandlers, messages.CapabilityWriteFile}})
	d.apply(presenceEntry{key: wire.AgentKey("default", "new"), value: b, op: jetstream.KeyValuePut})
	require.Empty(t, c.handlerProblems(context.Background(), spec))
}

// A fallback that reruns its step (max_attempts) or has its own timeout
// needs agents that announce fallback_runs: agents without it would run
// the fallback once, with the step's timeout, so the job is refused with
// the field.
func TestFallbackRunsFollowTheAgentsCapabilities(t *testing.T) {
	d := newAgentDirectory()
	c := &Coordinator{agents: d}
	fallback := func(of messages.OnFailure) messages.Step {
		of.Action, of.Fallback = messages.OnFailureFallback, "touch fixed"
		return messages.Step{Shell: "test -f fixed", RetryConfig: &messages.RetryConfig{OnFailure: &of}}
	}
	spec := &messages.JobSpec{AgentTemplate: []messages.Step{
		fallback(messages.OnFailure{}),
		fallback(messages.OnFailure{MaxAttempts: 3}),
		fallback(messages.OnFailure{Timeout: messages.Duration(time.Minute)}),
	}}
	b, _ := json.Marshal(messages.AgentPresence{Name: "older", Pool: "default",
		Capabilities: []string{messages.CapabilityForeach, messages.CapabilityHandlers, messages.CapabilityWriteFile}})
	d.apply(presenceEntry{key: wire.AgentKey("default", "older"), value: b, op: jetstream.KeyValuePut})
	var fields []string
	for _, p := range c.handlerProblems(context.Background(), spec) {
		fields = append(fields, p.Field)
		require.Contains(t, p.Message, "fallbacks that rerun their step")
	}
	require.Equal(t, []string{"agent_template[1].retry_config.on_failure.fallback.max_attempts",
		"agent_template[2].retry_config.on_failure.fallback.timeout"}, fields)

	b, _ = json.Marshal(messages.AgentPresence{Name: "new", Pool: "default", Capabilities: []string{messages.CapabilityFallbackRuns}})
	d.apply(presenceEntry{key: wire.AgentKey("default", "new"), value: b, op: jetstream.KeyValuePut})
	require.Empty(t, c.handlerProblems(context.Background(), spec))
}
