// Command agent runs a jetfleet agent: it pulls work items of one pool and
// runs their shell steps and built-in handlers (noop, sleep, flaky). To run
// Go handlers of your own, build an agent with package agent instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/obs"

	"github.com/jetfleet/jetfleet/internal/tracing/otlp"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(envflag.ExitCode(err))
	}
}

// gcPercent is the agent's GOGC unless the environment sets one: its live
// heap is small (buffered messages, items in flight) while it allocates
// for every item, and Go's default of 100 spent a sixth of its CPU on
// collection in the daemon benchmark.
const gcPercent = 400

func run(ctx context.Context, args []string, getenv func(string) string) error {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	env := envflag.New(getenv)
	var conn natsconn.Options
	conn.Register(fs, getenv)
	cfg := agent.Config{}
	fs.StringVar(&cfg.Prefix, "prefix", env.String("FLEET_PREFIX", "fleet"), "subject and resource prefix (env FLEET_PREFIX)")
	fs.StringVar(&cfg.Pool, "pool", env.String("FLEET_POOL", "default"), "pool whose items this agent runs (env FLEET_POOL)")
	fs.StringVar(&cfg.Name, "name", getenv("FLEET_AGENT_NAME"), "agent name in histories (default host-pid; env FLEET_AGENT_NAME)")
	fs.IntVar(&cfg.Concurrency, "concurrency", env.Int("FLEET_CONCURRENCY", agent.DefaultConcurrency), "items run at once (env FLEET_CONCURRENCY)")
	fs.IntVar(&cfg.Prefetch, "prefetch", env.Int("FLEET_PREFETCH", 0), "work messages buffered ahead of the workers (default: adaptive, env FLEET_PREFETCH)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", env.Duration("FLEET_SHUTDOWN_TIMEOUT", agent.DefaultShutdownTimeout), "how long in-flight items may finish at shutdown (env FLEET_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&cfg.KillGrace, "kill-grace", env.Duration("FLEET_KILL_GRACE", agent.DefaultKillGrace), "a shell step ended early (its timeout, cancel --kill, shutdown) has this long between SIGTERM and SIGKILL to its process group (env FLEET_KILL_GRACE)")
	fs.StringVar(&cfg.WorkDir, "work-dir", getenv("FLEET_WORK_DIR"), "where items' shell steps run: each item delivery in a fresh directory under <work-dir>/jetfleet-items, removed when it ends (default: the agent's working directory; env FLEET_WORK_DIR)")
	fs.StringVar(&cfg.ClaudeCommand, "claude-command", env.String("FLEET_CLAUDE_COMMAND", agent.DefaultClaudeCommand), "Claude Code's CLI, which runs claude steps headless: a path or a name on the PATH; an agent without it announces no claude capability (env FLEET_CLAUDE_COMMAND)")
	claudeArgs := fs.String("claude-args", env.String("FLEET_CLAUDE_ARGS", strings.Join(agent.DefaultClaudeArgs, " ")), "arguments of --claude-command before the prompt, separated by spaces (env FLEET_CLAUDE_ARGS)")
	fs.IntVar(&cfg.KeepFailed, "keep-failed", env.Int("FLEET_KEEP_FAILED", agent.DefaultKeepFailed), "directories of failed item deliveries kept in <work-dir>/jetfleet-failed, the most recent; negative = none (env FLEET_KEEP_FAILED)")
	fs.DurationVar(&cfg.StepTimeout, "step-timeout", env.Duration("FLEET_STEP_TIMEOUT", agent.DefaultStepTimeout), "timeout of a step that sets none (env FLEET_STEP_TIMEOUT)")
	httpAllow := fs.String("http-allow", getenv("FLEET_HTTP_ALLOW"), "comma-separated IP addresses and CIDR networks the http step may connect to, and no other (env FLEET_HTTP_ALLOW); default: any but loopback, link-local and the agent's NATS servers")
	secretEnv := fs.String("secret-env", getenv("FLEET_SECRET_ENV"), "the agent's environment variables that jobs' secrets may read ({provider: env}), comma-separated names or prefixes ending in * (env FLEET_SECRET_ENV); NATS_* and FLEET_* never, unless --step-env-unsafe; default: none")
	secretDir := fs.String("secret-dir", getenv("FLEET_SECRET_DIR"), "comma-separated directories whose files jobs' env_files and file secrets may name, relative paths under the first (env FLEET_SECRET_DIR); default: none (env files are skipped, file secrets fail)")
	stepEnv := fs.String("step-env", getenv("FLEET_STEP_ENV"), "more of the agent's environment variables that shell steps see, comma-separated names or prefixes ending in * (env FLEET_STEP_ENV); PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TZ and TMPDIR always")
	fs.BoolVar(&cfg.StepEnvUnsafe, "step-env-unsafe", env.Bool("FLEET_STEP_ENV_UNSAFE", false), "let --step-env pass NATS_* and FLEET_* variables, and the credentials they hold, to every job (env FLEET_STEP_ENV_UNSAFE=true)")
	fs.DurationVar(&cfg.PresenceInterval, "presence-interval", env.Duration("FLEET_PRESENCE_INTERVAL", agent.DefaultPresenceInterval), "how often the agent writes its presence (pool, items in flight) to the agents bucket; negative = never (env FLEET_PRESENCE_INTERVAL)")
	fs.DurationVar(&cfg.LimitLease, "limit-lease", env.Duration("FLEET_LIMIT_LEASE", agent.DefaultLimitLease), "a step limit's concurrency slot comes back this long after its agent stops renewing it (it died) (env FLEET_LIMIT_LEASE)")
	fs.DurationVar(&cfg.LimitWait, "limit-wait", env.Duration("FLEET_LIMIT_WAIT", agent.DefaultLimitWait), "a run waits this long in the agent for its step's limit before it waits outside (delayed nak or parked) (env FLEET_LIMIT_WAIT)")
	fs.DurationVar(&cfg.ParkAfter, "park-after", env.Duration("FLEET_PARK_AFTER", agent.DefaultParkAfter), "retries and snoozes with at least this delay wait in the park stream (holding no MaxAckPending slot) instead of a delayed nak; negative = never park (env FLEET_PARK_AFTER)")
	fs.DurationVar(&cfg.LocalRetryMax, "local-retry-max", env.Duration("FLEET_LOCAL_RETRY_MAX", agent.DefaultLocalRetryMax), "retries and snoozes with at most this delay run again on this agent after the delay (at most 3 in a row) instead of a delayed nak; negative = never (env FLEET_LOCAL_RETRY_MAX)")
	fs.BoolVar(&cfg.LocalRetryDurable, "local-retry-durable", env.Bool("FLEET_LOCAL_RETRY_DURABLE", false), "write the item's state before each local retry, so that an agent that dies between them loses no attempt from the count (costs a stored message per retry) (env FLEET_LOCAL_RETRY_DURABLE=true)")
	metricsAddr := fs.String("metrics-addr", getenv("FLEET_METRICS_ADDR"), "serve /metrics on this address, e.g. :9091 (env FLEET_METRICS_ADDR)")
	pprofAddr := fs.String("pprof-addr", getenv("FLEET_PPROF_ADDR"), "serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6061; off by default (env FLEET_PPROF_ADDR)")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	logLevel := fs.String("log-level", env.String("FLEET_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env FLEET_LOG_LEVEL)")
	verifyKey := fs.String("work-verify-key", getenv("FLEET_WORK_VERIFY_KEY"), "the coordinator's work-signing public key, or a file holding it (fleetctl auth init prints it and writes work-signing.pub): run only work items it signed for this pool (env FLEET_WORK_VERIFY_KEY)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("agent", version.Get())
		return nil
	}
	if err := env.Err(); err != nil {
		return err
	}
	if err := conn.ApplyContext(getenv, false); err != nil {
		return err
	}
	cfg.JSDomain = conn.JSDomain
	if k := strings.TrimSpace(*verifyKey); k != "" {
		if data, err := os.ReadFile(k); err == nil {
			k = strings.TrimSpace(string(data))
		}
		kp, err := nkeys.FromPublicKey(k)
		if err != nil {
			return fmt.Errorf("--work-verify-key: %w", err)
		}
		cfg.WorkVerifier = kp
	}
	for _, e := range strings.Split(*httpAllow, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.HTTPAllow = append(cfg.HTTPAllow, e)
		}
	}
	for _, e := range strings.Split(*secretEnv, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.SecretEnv = append(cfg.SecretEnv, e)
		}
	}
	for _, e := range strings.Split(*secretDir, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.SecretDirs = append(cfg.SecretDirs, e)
		}
	}
	for _, e := range strings.Split(*stepEnv, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.StepEnv = append(cfg.StepEnv, e)
		}
	}
	cfg.ClaudeArgs = strings.Fields(*claudeArgs)
	// Every child process of this program is a step: it reaps them all, and
	// whatever is orphaned in its container when it is PID 1.
	cfg.Reaper = agent.ReaperAll
	log, err := obs.Logger(os.Stderr, *logLevel, false)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg.Logger = log
	tp, shutdown, err := otlp.Setup(ctx, "jetfleet-agent", getenv)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}()
	cfg.TracerProvider = tp
	reg := obs.Registry()
	conn.Name = "jetfleet-agent"
	conn.OnAsyncError = func(err error) {
		switch {
		case deniedConsumerCreate(err, cfg.Prefix):
			// Least privilege: agents bind to their pool's consumer but may
			// not create it (provision.WaitPool tries, then waits).
			log.Warn().Str("pool", cfg.Pool).Msg("waiting for the coordinator to create this pool's work consumer (run it with --pools " + cfg.Pool + ", or submit a job for the pool)")
		case natsconn.IsPermissionViolation(err):
			log.Error().Err(err).Msg("NATS refused an operation: the agent's user lacks a permission (fleetctl auth permissions agent --pool " + cfg.Pool + ")")
		default:
			log.Warn().Err(err).Msg("NATS error")
		}
	}
	if err := obs.ServePprof(ctx, *pprofAddr, log); err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	if err := obs.ServeMetrics(ctx, *metricsAddr, reg, log); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	// Agents may start before the server, and a connection the server
	// closes for good is replaced: the agent runs until it is stopped.
	gens := obs.NewGenerations(reg)
	sup := natsconn.Supervisor{Options: conn, URL: "nats://127.0.0.1:4222", Logger: log}
	return sup.Run(ctx, func(ctx context.Context, nc *nats.Conn) error {
		cfg.Registerer = gens.Next()
		return agent.New(nc, cfg).HandleBuiltins().Run(ctx)
	})
}

// deniedConsumerCreate reports a refused request to create a consumer on
// the work stream ($JS.API.CONSUMER.CREATE.<PREFIX>_WORK.…).
func deniedConsumerCreate(err error, prefix string) bool {
	subject, ok := natsconn.DeniedPublish(err)
	return ok && strings.Contains(subject, ".CONSUMER.CREATE."+strings.ToUpper(prefix)+"_WORK.")
}
