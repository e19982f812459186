package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/pkg/messages"
	"github.com/jetfleet/jetfleet/pkg/retry"
)

// job is what an agent needs of a job, loaded once from fleet_jobs.
type job struct {
	id        string
	spec      *messages.JobSpec
	policies  []*retry.Policy
	templates []messages.Template // per step; zero for handler steps
	fallbacks []messages.Template // per step with a fallback
	env       []string
	onItem    string
}

var errJobNotFound = errors.New("agent: job not found")

// jobCache loads and keeps job specs; specs never change once accepted.
// Safe for concurrent use.
type jobCache struct {
	kv jetstream.KeyValue
	mu sync.Mutex
	m  map[string]*job
}

func newJobCache(kv jetstream.KeyValue) *jobCache {
	return &jobCache{kv: kv, m: map[string]*job{}}
}

func (c *jobCache) get(ctx context.Context, id string) (*job, error) {
	c.mu.Lock()
	j, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return j, nil
	}
	e, err := c.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errJobNotFound
	}
	if err != nil {
		return nil, err
	}
	var rec messages.JobRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("agent: job record %s: %w", id, err)
	}
	if rec.Spec == nil {
		return nil, errJobNotFound // a rejected submission has no spec
	}
	j, err = compileJob(id, rec.Spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) > 4096 { // jobs are few; bound the cache anyway
		clear(c.m)
	}
	c.m[id] = j
	c.mu.Unlock()
	return j, nil
}

func compileJob(id string, spec *messages.JobSpec) (*job, error) {
	j := &job{id: id, spec: spec, onItem: messages.ItemFailureDLQ}
	if ep := spec.ErrorPolicy; ep != nil && ep.OnItemFailure != nil && ep.OnItemFailure.Action != "" {
		j.onItem = ep.OnItemFailure.Action
	}
	for k, v := range spec.Env {
		j.env = append(j.env, k+"="+v)
	}
	for i, st := range spec.AgentTemplate {
		p, err := retry.NewPolicy(st.RetryConfig)
		if err != nil {
			return nil, fmt.Errorf("agent: job %s: agent_template[%d].retry_config: %w", id, i, err)
		}
		j.policies = append(j.policies, p)
		var t, fb messages.Template
		if st.Shell != "" {
			if t, err = messages.ParseTemplate(st.Shell); err != nil {
				return nil, fmt.Errorf("agent: job %s: agent_template[%d].shell: %w", id, i, err)
			}
		}
		if fa := p.OnFailure(); fa.NeedsFallback() {
			if fb, err = messages.ParseTemplate(fa.Fallback); err != nil {
				return nil, fmt.Errorf("agent: job %s: agent_template[%d] fallback: %w", id, i, err)
			}
		}
		j.templates = append(j.templates, t)
		j.fallbacks = append(j.fallbacks, fb)
	}
	return j, nil
}

func (j *job) stepName(i int) string {
	if n := j.spec.AgentTemplate[i].Name; n != "" {
		return n
	}
	return fmt.Sprintf("step-%d", i+1)
}
