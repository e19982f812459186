package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/limit"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func init() {
	register(command{name: "limit", summary: "the fleet's rate and concurrency limits: set, get, list, rm (fleetctl limit -h)", run: limitFamily.run})
}

// limitFamily is "fleetctl limit". Its subcommands read and write the
// limits bucket directly, with the operator's rights (docs/security.md).
var limitFamily = &family{
	name: "limit", usage: "limit <command> [flags]", width: 5, names: "set, get, list, rm",
	cmds: []command{
		{name: "set", summary: "create or change a named limit: set NAME --rate 40/s [--burst N] [--concurrency N] [--adaptive] [--pool P]", run: runLimitSet},
		{name: "get", summary: "a limit's configured and current rate, tokens, in flight, last minute's calls: get NAME [--json]", run: runLimitGet},
		{name: "list", summary: "every limit, named and inline: list [--json]", run: runLimitList},
		{name: "rm", summary: "remove a named limit: rm NAME", run: runLimitRm},
	},
}

// limits connects, opens the limits bucket, calls fn with its store and a
// context bounded by --timeout, and closes both. It returns fn's exit
// code, or 1 when the bucket could not be opened.
func (c *fleetCmd) limits(ctx context.Context, fn func(ctx context.Context, s *limit.Store) int) int {
	if !c.connect() {
		return exitFailed
	}
	defer c.close()
	names, err := messages.NewNames(c.conn.prefix)
	if err != nil {
		errorf(c.env, "%v", err)
		return exitFailed
	}
	var s *limit.Store
	js, err := natsconn.JetStream(c.nc, c.conn.JSDomain)
	if err == nil {
		var kv jetstream.KeyValue
		kctx, cancel := c.bound(ctx)
		kv, err = js.KeyValue(kctx, names.LimitsBucket())
		cancel()
		if err == nil {
			s, err = limit.NewStore(js, kv, nil, zerolog.Nop())
		}
	}
	if err != nil {
		errorf(c.env, "limits bucket %s: %v (is a coordinator running?)", names.LimitsBucket(), err)
		return exitFailed
	}
	defer s.Close()
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return fn(ctx, s)
}

// rateFlag reads --rate.
type rateFlag struct{ r messages.Rate }

func (f *rateFlag) String() string {
	if f.r == 0 {
		return ""
	}
	return f.r.String()
}
func (f *rateFlag) Set(s string) error { return f.r.UnmarshalText([]byte(s)) }

// parseShares parses --share: "pool=weight,..."; "" keeps the weights
// (nil), "-" clears them (an empty map).
func parseShares(v string) (map[string]int, error) {
	switch strings.TrimSpace(v) {
	case "":
		return nil, nil
	case "-":
		return map[string]int{}, nil
	}
	out := map[string]int{}
	for _, part := range strings.Split(v, ",") {
		p, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want pool=weight", part)
		}
		if err := messages.ValidPool(p); err != nil {
			return nil, fmt.Errorf("pool %q: %w", p, err)
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 || n > limit.MaxShareWeight {
			return nil, fmt.Errorf("pool %s: weight %q, want 1 to %d", p, w, limit.MaxShareWeight)
		}
		out[p] = n
	}
	return out, nil
}

func runLimitSet(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "limit set", "limit set NAME --rate 40/s [--burst N] [--concurrency N] [--adaptive] [--pool P] [--share P=W,...]", noJSON)
	fs := c.fs
	var rate rateFlag
	fs.Var(&rate, "rate", "calls allowed per /s, /m or /h, e.g. 40/s, 600/m")
	burst := fs.Int("burst", 0, "calls that may start at once after a quiet period (default: one second of rate)")
	conc := fs.Int("concurrency", 0, "calls in flight across the fleet (0: no cap)")
	adaptive := fs.Bool("adaptive", false, "halve the rate on overload failures, raise it back on successes")
	pool := fs.String("pool", "", "only this pool's agents may use it (default: any)")
	shares := fs.String("share", "", "the pools' weights in the limit's division between the pools that use it, e.g. gpu=3,cpu=1 (default: 1 each; \"-\" clears them; docs/limits.md)")
	if code, ok := c.parse(args, 1); !ok {
		return code
	}
	weights, err := parseShares(*shares)
	if err != nil {
		errorf(env, "--share: %v", err)
		return exitUsage
	}
	name := fs.Arg(0)
	if err := messages.ValidLimitName(name); err != nil {
		errorf(env, "limit name %q: %v", name, err)
		return exitUsage
	}
	cfg := messages.LimitConfig{Rate: rate.r, Burst: *burst, Concurrency: *conc, Adaptive: *adaptive, Pool: *pool}
	if errs := cfg.Validate(""); len(errs) > 0 {
		for _, e := range errs {
			errorf(env, "--%s: %s", e.Field, e.Message)
		}
		return exitUsage
	}
	return c.limits(ctx, func(ctx context.Context, s *limit.Store) int {
		rec, err := s.SetShares(ctx, name, cfg.WithDefaults(), weights)
		if err != nil {
			errorf(env, "%v", err)
			return exitFailed
		}
		printLimit(env, name, true, rec, s.Now())
		return exitOK
	})
}

// limitView is a limit as fleetctl prints it in JSON.
type limitView struct {
	Name        string        `json:"name"`
	Named       bool          `json:"named"`
	Rate        messages.Rate `json:"rate,omitempty"`
	CurrentRate float64       `json:"current_rate,omitempty"`
	Burst       int           `json:"burst,omitempty"`
	Tokens      float64       `json:"tokens"`
	Concurrency int           `json:"concurrency,omitempty"`
	InFlight    int           `json:"in_flight"`
	Adaptive    bool          `json:"adaptive,omitempty"`
	Pool        string        `json:"pool,omitempty"`
	// Shares are the pools' weights in the limit's division (1 each
	// unless set).
	Shares map[string]int `json:"shares,omitempty"`
	// LastMinute counts calls and outcomes in the last full minute, or
	// the current one while the limit is younger.
	Calls     int `json:"calls_last_minute"`
	Successes int `json:"successes_last_minute"`
	Overloads int `json:"overloads_last_minute"`
}

func viewOf(name string, named bool, rec limit.Record, now time.Time) limitView {
	st := rec.Stats
	calls, succ, over := st.PrevCalls, st.PrevSuccesses, st.PrevOverloads
	if now.Sub(st.Since) >= time.Minute || calls+succ+over == 0 {
		calls, succ, over = st.Calls, st.Successes, st.Overloads
	}
	cfg := rec.WithDefaults()
	return limitView{
		Name: name, Named: named, Rate: cfg.Rate, CurrentRate: rec.Rate(), Burst: cfg.Burst, Tokens: rec.TokensAt(now),
		Concurrency: cfg.Concurrency, InFlight: rec.InFlight(now), Adaptive: cfg.Adaptive, Pool: cfg.Pool,
		Calls: calls, Successes: succ, Overloads: over, Shares: rec.Shares,
	}
}

func printLimit(env *cliEnv, name string, named bool, rec limit.Record, now time.Time) {
	v := viewOf(name, named, rec, now)
	tw := newTable(env.stdout)
	kind := "named"
	if !named {
		kind = "inline"
	}
	fmt.Fprintf(tw, "limit\t%s (%s)\n", cell(name), kind)
	if v.Rate > 0 {
		fmt.Fprintf(tw, "  rate\t%s configured, %.3g/s current\n", v.Rate, v.CurrentRate)
		fmt.Fprintf(tw, "  burst\t%d (%.1f tokens now)\n", v.Burst, v.Tokens)
	}
	if v.Concurrency > 0 {
		fmt.Fprintf(tw, "  concurrency\t%d in flight of %d\n", v.InFlight, v.Concurrency)
	}
	fmt.Fprintf(tw, "  adaptive\t%v\n", v.Adaptive)
	if v.Pool != "" {
		fmt.Fprintf(tw, "  pool\t%s\n", v.Pool)
	}
	if len(v.Shares) > 0 {
		pools := slices.Sorted(maps.Keys(v.Shares))
		parts := make([]string, len(pools))
		for i, p := range pools {
			parts[i] = fmt.Sprintf("%s=%d", p, v.Shares[p])
		}
		fmt.Fprintf(tw, "  shares\t%s (other pools 1)\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(tw, "  last minute\t%d calls, %d successes, %d overload failures\n", v.Calls, v.Successes, v.Overloads)
	_ = tw.Flush()
}

func runLimitGet(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "limit get", "limit get NAME [--json]", withJSON)
	if code, ok := c.parse(args, 1); !ok {
		return code
	}
	name := c.fs.Arg(0)
	return c.limits(ctx, func(ctx context.Context, s *limit.Store) int {
		// The limit with what the pools' shares of it hold.
		rec, found, err := s.View(ctx, limit.NamedKey(name))
		if err == nil && !found {
			// An inline limit, by its expanded key.
			rec, found, err = s.View(ctx, limit.InlineKey(name))
			if found {
				return showLimit(env, name, false, rec, s.Now(), c.asJSON())
			}
		}
		switch {
		case err != nil:
			errorf(env, "%v", err)
			return exitFailed
		case !found:
			errorf(env, "no limit %q", name)
			return exitFailed
		}
		return showLimit(env, name, true, rec, s.Now(), c.asJSON())
	})
}

func showLimit(env *cliEnv, name string, named bool, rec limit.Record, now time.Time, asJSON bool) int {
	if asJSON {
		writeJSON(env.stdout, viewOf(name, named, rec, now))
		return exitOK
	}
	printLimit(env, name, named, rec, now)
	return exitOK
}

func runLimitList(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "limit list", "limit list [--json]", withJSON)
	if code, ok := c.parse(args, 0); !ok {
		return code
	}
	return c.limits(ctx, func(ctx context.Context, s *limit.Store) int {
		return listLimits(ctx, c, s)
	})
}

func listLimits(ctx context.Context, c *fleetCmd, s *limit.Store) int {
	env := c.env
	keys, err := s.Keys(ctx)
	if err != nil {
		errorf(env, "%v", err)
		return exitFailed
	}
	views := []limitView{}
	seen := map[string]bool{}
	for _, k := range keys {
		if _, key, ok := limit.SplitShareKey(k); ok {
			k = key // a pool's share: shown with its limit
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		rec, found, err := s.View(ctx, k)
		if err != nil {
			errorf(env, "%v", err)
			return exitFailed
		}
		if found {
			name, named := limit.KeyName(k)
			views = append(views, viewOf(name, named, rec, s.Now()))
		}
	}
	if c.printedJSON(views) {
		return exitOK
	}
	tw := newTable(env.stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tRATE\tCURRENT\tBURST\tIN FLIGHT\tADAPTIVE\tCALLS/MIN")
	for _, v := range views {
		kind, rate, conc := "named", "-", "-"
		if !v.Named {
			kind = "inline"
		}
		if v.Rate > 0 {
			rate = v.Rate.String()
		}
		if v.Concurrency > 0 {
			conc = fmt.Sprintf("%d/%d", v.InFlight, v.Concurrency)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3g/s\t%d\t%s\t%v\t%d\n", cell(v.Name), kind, rate, v.CurrentRate, v.Burst, conc, v.Adaptive, v.Calls)
	}
	_ = tw.Flush()
	return exitOK
}

func runLimitRm(ctx context.Context, env *cliEnv, args []string) int {
	c := newFleetCmd(env, "limit rm", "limit rm NAME", noJSON)
	if code, ok := c.parse(args, 1); !ok {
		return code
	}
	name := c.fs.Arg(0)
	return c.limits(ctx, func(ctx context.Context, s *limit.Store) int {
		if err := s.Delete(ctx, limit.NamedKey(name)); err != nil {
			if errors.Is(err, limit.ErrNotFound) {
				errorf(env, "no limit %q", name)
			} else {
				errorf(env, "%v", err)
			}
			return exitFailed
		}
		fmt.Fprintf(env.stdout, "limit %s removed; steps that name it fail until it is set again\n", name)
		return exitOK
	})
}
