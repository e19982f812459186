package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "version", summary: "print fleetctl's version, the coordinators' (their micro service info) and the agents' (their presence)", run: runVersion})
}

// fleetVersions is what `fleetctl version --json` prints.
type fleetVersions struct {
	Fleetctl     version.Info         `json:"fleetctl"`
	Coordinators []coordinatorVersion `json:"coordinators"`
	Agents       []agentVersion       `json:"agents"`
}

// coordinatorVersion is one coordinator's answer to $SRV.INFO.jetfleet.
// Build is empty for a coordinator before v0.4.0, which names no build
// in its service metadata.
type coordinatorVersion struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	Build   string `json:"build,omitempty"`
}

// agentVersion is one agent's presence record, reduced to who and which
// build. Version is empty for an agent before v0.4.0.
type agentVersion struct {
	Name    string `json:"name"`
	Pool    string `json:"pool"`
	Host    string `json:"host,omitempty"`
	Version string `json:"version,omitempty"`
}

func runVersion(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "version", "version [--json] [--wait D] [connection flags]")
	conn := addConnFlags(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	wait := fs.Duration("wait", time.Second, "how long to collect the coordinators' answers")
	if code, ok := parseArgs(fs, args, 0); !ok {
		return code
	}
	out := fleetVersions{Fleetctl: version.Get()}
	nc, _, err := conn.client()
	if err != nil {
		printVersions(env, out, *asJSON)
		errorf(env, "the fleet's versions: %v", err)
		return exitFailed
	}
	defer nc.Close()
	var errs []error
	if out.Coordinators, err = coordinatorVersions(ctx, nc, conn.prefix, *wait); err != nil {
		errs = append(errs, fmt.Errorf("coordinators: %w", err))
	}
	if out.Agents, err = agentVersions(ctx, nc, conn.prefix, conn.timeout); err != nil {
		errs = append(errs, fmt.Errorf("agents: %w", err))
	}
	printVersions(env, out, *asJSON)
	if err := errors.Join(errs...); err != nil {
		errorf(env, "%v", err)
		return exitFailed
	}
	return exitOK
}

// coordinatorVersions asks every jetfleet micro service for its info, as
// `nats micro info jetfleet` does, and keeps the answers of prefix's
// coordinators (and of those before v0.4.0, which do not say theirs).
func coordinatorVersions(ctx context.Context, nc *nats.Conn, prefix string, wait time.Duration) ([]coordinatorVersion, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, messages.ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out := []coordinatorVersion{}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return out, err
		}
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return out, fmt.Errorf("an answer to %s: %w", subject, err)
		}
		if p, ok := info.Metadata["prefix"]; ok && p != prefix {
			continue
		}
		out = append(out, coordinatorVersion{ID: info.ID, Version: info.Version, Build: info.Metadata["build"]})
	}
	slices.SortFunc(out, func(a, b coordinatorVersion) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// agentVersions reads every agent's presence in the agents bucket.
func agentVersions(ctx context.Context, nc *nats.Conn, prefix string, timeout time.Duration) ([]agentVersion, error) {
	names, err := messages.NewNames(prefix)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := []agentVersion{}
	kv, err := js.KeyValue(ctx, names.AgentsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil // no agent has announced itself yet
	}
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // the agent stopped meanwhile
		}
		if err != nil {
			return out, err
		}
		var p messages.AgentPresence
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return out, fmt.Errorf("presence %s: %w", key, err)
		}
		out = append(out, agentVersion{Name: p.Name, Pool: p.Pool, Host: p.Host, Version: p.Version})
	}
	slices.SortFunc(out, func(a, b agentVersion) int { return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}

func printVersions(env *cliEnv, v fleetVersions, asJSON bool) {
	if asJSON {
		writeJSON(env.stdout, v)
		return
	}
	fmt.Fprintf(env.stdout, "fleetctl     %s\n", v.Fleetctl)
	tw := newTable(env.stdout)
	for _, c := range v.Coordinators {
		build := c.Build
		if build == "" {
			build = c.Version + " (before v0.4.0: no build named)"
		}
		fmt.Fprintf(tw, "coordinator\t%s\t%s\n", cell(c.ID), cell(build))
	}
	for _, a := range v.Agents {
		build := a.Version
		if build == "" {
			build = "before v0.4.0 (its presence names no version)"
		}
		fmt.Fprintf(tw, "agent\t%s/%s\t%s\n", cell(a.Pool), cell(a.Name), cell(build))
	}
	_ = tw.Flush()
	if v.Coordinators != nil && len(v.Coordinators) == 0 {
		fmt.Fprintln(env.stdout, "no coordinator answered")
	}
}
