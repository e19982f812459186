// Command coordinator runs a jetfleet coordinator: it accepts jobs (API and
// durable intake), publishes their items and tracks them to the end.
//
// With no --server (and no NATS_URL) it starts an embedded JetStream server
// listening on --listen with data under --data-dir, so that
//
//	go run ./cmd/coordinator   # then, elsewhere:
//	go run ./cmd/agent
//
// works on a bare machine. The embedded server admits anyone, so it
// listens on loopback only, unless --auth-dir gives it the users and
// permissions `fleetctl auth init` wrote:
//
//	fleetctl auth init auth --tls
//	coordinator --listen 0.0.0.0:4222 --auth-dir auth --pools default
//	agent --server tls://host:4222 --nkey auth/agent-default.nk --tls-ca auth/ca.pem
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/budget"
	"github.com/jetfleet/jetfleet/internal/embedded"
	"github.com/jetfleet/jetfleet/internal/envflag"
	"github.com/jetfleet/jetfleet/internal/gctune"
	"github.com/jetfleet/jetfleet/internal/lease"
	"github.com/jetfleet/jetfleet/internal/natsconn"
	"github.com/jetfleet/jetfleet/internal/obs"
	"github.com/jetfleet/jetfleet/internal/provision"

	"github.com/jetfleet/jetfleet/internal/tracing/otlp"
	"github.com/jetfleet/jetfleet/internal/version"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(envflag.ExitCode(err))
	}
}

// heapFloor is the coordinator's heap floor unless the environment sets
// GOGC (internal/gctune): its live heap is a few megabytes while it
// allocates for every work message and result, and Go's default collected
// every few megabytes, a fifth of its CPU in the daemon benchmark; above
// the floor (a large input's count) it collects as the default does.
const heapFloor = 64 << 20

func run(ctx context.Context, args []string, getenv func(string) string) error {
	if getenv("GOGC") == "" {
		defer gctune.Start(heapFloor)()
	}
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	env := envflag.New(getenv)
	var conn natsconn.Options
	conn.Register(fs, getenv)
	cfg := coordinator.Config{}
	fs.StringVar(&cfg.Prefix, "prefix", env.String("FLEET_PREFIX", "fleet"), "subject and resource prefix (env FLEET_PREFIX)")
	fs.IntVar(&cfg.Provision.Replicas, "replicas", env.Int("FLEET_REPLICAS", 1), "replicas of every stream and bucket: 1, or 3 on a 3-node cluster (env FLEET_REPLICAS)")
	fs.DurationVar(&cfg.Provision.AckWait, "ack-wait", env.Duration("FLEET_ACK_WAIT", 0), "work consumers' AckWait, the crash-detection timeout (default 30s) (env FLEET_ACK_WAIT)")
	fs.IntVar(&cfg.Provision.MaxDeliver, "max-deliver", env.Int("FLEET_MAX_DELIVER", 0), "work consumers' MaxDeliver backstop (default 100) (env FLEET_MAX_DELIVER)")
	fs.IntVar(&cfg.Provision.MaxAckPending, "max-ack-pending", env.Int("FLEET_MAX_ACK_PENDING", 0), "work consumers' MaxAckPending: items in flight plus retries waiting in a delayed nak, i.e. shorter than the agents' --park-after (default 20000) (env FLEET_MAX_ACK_PENDING)")
	fs.Int64Var(&cfg.Provision.DLQMaxBytes, "dlq-max-bytes", env.Int64("FLEET_DLQ_MAX_BYTES", 0), "each pool's dead-letter quota in bytes, which JetStream reserves of every node's max_file_store when the pool is made: --max-pools times this must fit beside the fleet's data (default 16 MiB; -1 = no byte quota, none reserved: bound it with --dlq-max-msgs) (env FLEET_DLQ_MAX_BYTES)")
	fs.Int64Var(&cfg.Provision.DLQMaxMsgs, "dlq-max-msgs", env.Int64("FLEET_DLQ_MAX_MSGS", 0), "each pool's dead-letter quota in entries (default unlimited) (env FLEET_DLQ_MAX_MSGS)")
	fs.Int64Var(&cfg.JobQueue, "job-queue", env.Int64("FLEET_JOB_QUEUE", coordinator.DefaultJobQueue), "fair share: most messages of one job in the work stream at once (queued or running; parked retries excluded), so a new job starts behind at most this many items of each running job; negative = unbounded (env FLEET_JOB_QUEUE)")
	fs.StringVar(&cfg.InputDir, "input-dir", getenv("FLEET_INPUT_DIR"), "serve file inputs from this directory, and nowhere else (default: none, file inputs are refused; env FLEET_INPUT_DIR)")
	// Limits on what a submission may ask of the fleet (docs/security.md).
	fs.IntVar(&cfg.MaxSpecBytes, "max-spec-bytes", env.Int("FLEET_MAX_SPEC_BYTES", coordinator.DefaultMaxSpecBytes), "largest job spec accepted, through the API and the durable intake (env FLEET_MAX_SPEC_BYTES)")
	fs.Int64Var(&cfg.MaxItems, "max-items", int64(env.Int("FLEET_MAX_ITEMS", coordinator.DefaultMaxItems)), "most items one job may have (env FLEET_MAX_ITEMS)")
	fs.Int64Var(&cfg.MaxPathNodes, "max-path-nodes", int64(env.Int("FLEET_MAX_PATH_NODES", coordinator.DefaultMaxPathNodes)), "most nodes a json_path that cannot be streamed may select or visit (env FLEET_MAX_PATH_NODES)")
	fs.IntVar(&cfg.MaxGroups, "max-groups", env.Int("FLEET_MAX_GROUPS", coordinator.DefaultMaxGroups), "most groups group_by may yield (env FLEET_MAX_GROUPS)")
	fs.IntVar(&cfg.MaxSchedulesPerPool, "max-schedules-per-pool", env.Int("FLEET_MAX_SCHEDULES_PER_POOL", coordinator.DefaultMaxSchedulesPerPool), "most schedules whose jobs run on one pool: at the limit schedules.add is refused (env FLEET_MAX_SCHEDULES_PER_POOL)")
	fs.IntVar(&cfg.MaxOpenJobs, "max-open-jobs", env.Int("FLEET_MAX_OPEN_JOBS", coordinator.DefaultMaxOpenJobs), "most jobs pending or running at once: at the limit jobs.submit is refused and durable submissions wait (env FLEET_MAX_OPEN_JOBS)")
	fs.IntVar(&cfg.MaxPools, "max-pools", env.Int("FLEET_MAX_POOLS", coordinator.DefaultMaxPools), "most pools (work consumers) jobs may create; the --pools are always accepted; -1 = only the --pools (env FLEET_MAX_POOLS)")
	fs.IntVar(&cfg.ErrorSignatures, "error-signatures", env.Int("FLEET_ERROR_SIGNATURES", coordinator.DefaultErrorSignatures), "error signatures a job's report keeps, the most frequent; the rest are counted as other (env FLEET_ERROR_SIGNATURES)")
	fs.IntVar(&cfg.IntakeMaxDeliveries, "intake-max-deliveries", env.Int("FLEET_INTAKE_MAX_DELIVERIES", coordinator.DefaultIntakeMaxDeliveries), "tries of a durable submission before it is rejected with the reason (env FLEET_INTAKE_MAX_DELIVERIES)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", env.Duration("FLEET_LEASE_TTL", lease.DefaultTTL), "how long the leading coordinator's lease outlives its last renewal: another coordinator of the prefix takes over after about this long when it dies (env FLEET_LEASE_TTL)")
	// Retention (docs/deploy.md, "Retention"): how long finished jobs' records stay.
	retention := messages.Duration(coordinator.DefaultJobRetention)
	if v := getenv("FLEET_JOB_RETENTION"); v != "" {
		d, err := messages.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("FLEET_JOB_RETENTION: %w", err)
		}
		retention = d
	}
	fs.TextVar(&retention, "job-retention", retention, "how long a finished job's record is kept before it is deleted with the rest of the job's data, e.g. 7d, 36h (env FLEET_JOB_RETENTION)")
	fs.DurationVar(&cfg.LateResultWindow, "late-result-window", env.Duration("FLEET_LATE_RESULT_WINDOW", coordinator.DefaultLateResultWindow), "how long a finished job still counts late results; its data is cleaned up after it (and after its dead letters have left the DLQ) (env FLEET_LATE_RESULT_WINDOW)")
	// AD-44's settings: the environment, then the flags over it.
	var budgetSettings budget.Settings
	if err := envflag.Policy(fs, getenv, &budgetSettings, &cfg.BestEffort); err != nil {
		return err
	}
	metricsAddr := fs.String("metrics-addr", getenv("FLEET_METRICS_ADDR"), "serve /metrics on this address, e.g. :9090 (env FLEET_METRICS_ADDR)")
	pprofAddr := fs.String("pprof-addr", getenv("FLEET_PPROF_ADDR"), "serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off by default (env FLEET_PPROF_ADDR)")
	httpAllow := fs.String("http-allow", getenv("FLEET_HTTP_ALLOW"), "comma-separated IP addresses and CIDR networks the agents' http steps may reach (the agents' --http-allow): a URL naming another address, or by default a loopback or link-local one, is refused at submission (env FLEET_HTTP_ALLOW)")
	pools := fs.String("pools", getenv("FLEET_POOLS"), "comma-separated pools whose work consumers are created at start, so agents that may only bind to theirs (least privilege) find them (env FLEET_POOLS)")
	teams := fs.String("teams", getenv("FLEET_TEAMS"), "teams that share the fleet and the pools each may submit to, as fleetctl auth init --teams wrote them: red=poola+poolb,blue=poolc; each team calls the API on its own subjects and sees its own jobs only (docs/security.md \"Teams\"; env FLEET_TEAMS)")
	listen := fs.String("listen", env.String("FLEET_LISTEN", "127.0.0.1:4222"), "embedded server address when no --server is given; beyond loopback it needs --auth-dir (env FLEET_LISTEN)")
	authDir := fs.String("auth-dir", getenv("FLEET_AUTH_DIR"), "embedded server: admit only the users `fleetctl auth init DIR` wrote (and TLS if generated); the coordinator connects as DIR/coordinator.nk (env FLEET_AUTH_DIR)")
	dataDir := fs.String("data-dir", env.String("FLEET_DATA_DIR", "jetfleet-data"), "embedded server's JetStream directory (env FLEET_DATA_DIR)")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	logLevel := fs.String("log-level", env.String("FLEET_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env FLEET_LOG_LEVEL)")
	signingKey := fs.String("work-signing-key", getenv("FLEET_WORK_SIGNING_KEY"), "sign every work item with the nkey seed in this file (fleetctl auth init writes work-signing.nk; agents verify with --work-verify-key); with --auth-dir, DIR/work-signing.nk when present (env FLEET_WORK_SIGNING_KEY)")
	var uiFlags uiOptions
	uiFlags.register(fs, getenv, env)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("coordinator", version.Get())
		return nil
	}
	if err := env.Err(); err != nil {
		return err
	}
	cfg.Budget = coordinator.BudgetSettings(budgetSettings)
	if *signingKey == "" && *authDir != "" {
		if p := filepath.Join(*authDir, auth.WorkSigningFile); fileExists(p) {
			*signingKey = p
		}
	}
	if *signingKey != "" {
		seed, err := os.ReadFile(*signingKey)
		if err != nil {
			return fmt.Errorf("--work-signing-key: %w", err)
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return fmt.Errorf("--work-signing-key: %s: %w", *signingKey, err)
		}
		cfg.WorkSigner = kp
	}
	cfg.JobRetention = retention.D()
	if err := conn.ApplyContext(getenv, false); err != nil {
		return err
	}
	cfg.JSDomain = conn.JSDomain
	for _, p := range strings.Split(*pools, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Pools = append(cfg.Pools, p)
		}
	}
	teamPools, err := auth.ParseTeams(*teams)
	if err != nil {
		return fmt.Errorf("--teams: %w", err)
	}
	cfg.Teams = teamPools
	for _, e := range strings.Split(*httpAllow, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.HTTPAllow = append(cfg.HTTPAllow, e)
		}
	}
	log, err := obs.Logger(os.Stderr, *logLevel, false)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg.Logger = log
	tp, shutdown, err := otlp.Setup(ctx, "jetfleet-coordinator", getenv)
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

	url := conn.URL
	if url != "" && *authDir != "" {
		return errors.New("--auth-dir secures the embedded server; with --server, give the coordinator's credentials (--nkey) instead")
	}
	if url == "" {
		host, port, err := splitHostPort(*listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		srv, err := embedded.Start(embedded.Options{Host: host, Port: port, StoreDir: *dataDir, AuthDir: *authDir})
		if err != nil {
			return err
		}
		if *authDir != "" {
			useAuthDir(&conn, *authDir)
		}
		defer srv.Shutdown()
		url = srv.URL()
		log.Info().Str("url", url).Str("data_dir", *dataDir).Msg("embedded JetStream server started")
	}
	conn.Name = "jetfleet-coordinator"
	conn.OnAsyncError = logAsyncError(log)
	if err := obs.ServePprof(ctx, *pprofAddr, log); err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	if err := obs.ServeMetrics(ctx, *metricsAddr, reg, log); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	// The dashboard has its own connection (the coordinator's may be
	// replaced below), with --ui-creds/--ui-nkey when given.
	dash, err := uiFlags.dashboard(conn, url, cfg.Prefix, log, reg)
	if err != nil {
		return err
	}
	dash.serve(ctx)
	defer dash.close()
	// A connection the server closes for good is replaced, and the
	// coordinator resumes its jobs on the new one, as after a restart.
	gens := obs.NewGenerations(reg)
	sup := natsconn.Supervisor{Options: conn, URL: url, Logger: log}
	return sup.Run(ctx, func(ctx context.Context, nc *nats.Conn) error {
		cfg.Registerer = gens.Next()
		c, err := coordinator.New(nc, cfg)
		if err != nil {
			return err
		}
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(ctx) }()
		select {
		case <-c.Ready():
			if err := ensurePools(ctx, nc, cfg, *pools); err != nil {
				log.Error().Err(err).Msg("cannot create the pools' work consumers; agents wait until a job for their pool arrives")
			}
		case err := <-runErr:
			return err
		}
		return <-runErr
	})
}

// useAuthDir makes the coordinator connect to its embedded server as the
// coordinator user of dir, trusting dir's CA, unless flags say otherwise.
func useAuthDir(conn *natsconn.Options, dir string) {
	if conn.NKey == "" && conn.Creds == "" && conn.User == "" {
		conn.NKey = filepath.Join(dir, auth.SeedFile("coordinator"))
	}
	if ca := filepath.Join(dir, auth.CAFile); conn.TLSCA == "" {
		if _, err := os.Stat(ca); err == nil {
			conn.TLSCA = ca
		}
	}
}

// ensurePools creates the work consumer of each pool in the comma-separated
// list, as accepting a job for the pool would.
func ensurePools(ctx context.Context, nc *nats.Conn, cfg coordinator.Config, list string) error {
	names, err := messages.NewNames(cfg.Prefix)
	if err != nil {
		return err
	}
	js, err := natsconn.JetStream(nc, cfg.JSDomain)
	if err != nil {
		return err
	}
	// Role keys of the previous release name no pool dead-letter stream
	// and no specs bucket: asked once, refused at once, skipped
	// (docs/deploy.md, "Upgrades").
	denials := natsconn.WatchDenials(nc)
	may := func(ctx context.Context, stream string) bool {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return denials.StreamPermitted(ctx, natsconn.APIPrefix(cfg.JSDomain), stream)
	}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := messages.ValidPool(p); err != nil {
			return fmt.Errorf("--pools: %q: %w", p, err)
		}
		if _, err := provision.EnsurePoolPermitted(ctx, js, names, p, provision.Config(cfg.Provision), may); err != nil {
			return fmt.Errorf("--pools: %q: %w", p, err)
		}
	}
	return nil
}

// fileExists reports whether path names a file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// logAsyncError logs what the server reports asynchronously; a permissions
// violation means this user's role lacks a grant the coordinator needs.
func logAsyncError(log zerolog.Logger) func(error) {
	return func(err error) {
		if natsconn.IsPermissionViolation(err) {
			log.Error().Err(err).Msg("NATS refused an operation: the coordinator's user lacks a permission (fleetctl auth permissions coordinator)")
			return
		}
		log.Warn().Err(err).Msg("NATS error")
	}
}

func splitHostPort(s string) (string, int, error) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			p, err := strconv.Atoi(s[i+1:])
			if err != nil {
				return "", 0, fmt.Errorf("bad port in %q", s)
			}
			return s[:i], p, nil
		}
	}
	return "", 0, fmt.Errorf("want host:port, got %q", s)
}
