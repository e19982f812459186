package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/internal/obs"
	"github.com/jetfleet/jetfleet/internal/provision"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// natsExporterMetrics are the prometheus-nats-exporter series the dashboard
// may query (from its -varz and -jsz=all collectors); everything else must
// be ours or Prometheus's own.
var natsExporterMetrics = []string{
	"gnatsd_varz_connections", "gnatsd_varz_slow_consumers", "gnatsd_varz_in_msgs", "gnatsd_varz_out_msgs",
	"gnatsd_varz_mem", "gnatsd_varz_cpu",
	"jetstream_server_total_streams", "jetstream_server_total_consumers", "jetstream_server_total_messages",
	"jetstream_stream_total_messages", "jetstream_stream_total_bytes",
	"jetstream_consumer_num_pending", "jetstream_consumer_num_ack_pending", "jetstream_consumer_num_redelivered",
	"jetstream_consumer_num_waiting",
}

// recorder is a Registerer that remembers every collector registered, so
// that the names of vectors with no series yet can be listed too.
type recorder struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// names lists the metric names of every registered collector.
func (r *recorder) names() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range r.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// ourMetrics builds the registries the binaries build — obs.Registry, a
// coordinator's and an agent's (with their budget metrics) — and returns
// every metric name in them.
func ourMetrics(t *testing.T) map[string]bool {
	srv := fleettest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	creg := &recorder{Registry: obs.Registry()}
	areg := &recorder{Registry: obs.Registry()}
	coord, err := coordinator.New(srv.Connect(t), coordinator.Config{Registerer: creg})
	require.NoError(t, err)
	done := make(chan struct{}, 2)
	go func() { _ = coord.Run(ctx); done <- struct{}{} }()
	<-coord.Ready()
	_, err = provision.EnsurePool(ctx, srv.JS(), messages.MustNames(""), "default", provision.Config{})
	require.NoError(t, err)
	a := agent.New(srv.Connect(t), agent.Config{Registerer: areg}).HandleBuiltins()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	// The agent registers its metrics once it has bound to its consumer,
	// one by one: wait for the last of them.
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if !areg.names()["jetfleet_agent_step_leftovers_killed_total"] {
			return fmt.Errorf("agent metrics not registered yet")
		}
		return nil
	})
	all := creg.names()
	for n := range areg.names() {
		all[n] = true
	}
	// The Go and process collectors do not describe their metrics one by
	// one: take what they gather.
	mfs, err := obs.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		all[mf.GetName()] = true
	}
	return all
}

var (
	labelMatchers = regexp.MustCompile(`\{[^}]*\}`)
	grouping      = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ranges        = regexp.MustCompile(`\[[^\]]*\]`)
	identifier    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlWords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true}
)

// queriedMetrics returns the metric names a PromQL expression selects.
func queriedMetrics(expr string) []string {
	e := labelMatchers.ReplaceAllString(expr, "")
	e = grouping.ReplaceAllString(e, "")
	e = ranges.ReplaceAllString(e, "")
	var out []string
	for _, m := range identifier.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") || promqlWords[m] {
			continue // a function call or a keyword
		}
		out = append(out, m)
	}
	return out
}

func TestQueriedMetrics(t *testing.T) {
	require.Equal(t, []string{"a_bucket"}, queriedMetrics(`histogram_quantile(0.95, sum by (le, kind) (rate(a_bucket{x="y"}[5m])))`))
	require.Equal(t, []string{"a", "b"}, queriedMetrics(`sum(a) / on(x) count(b{job=~"j-.*"} == 1)`))
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard.
func dashboardExprs(t *testing.T, path string) []string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &d), "the dashboard is JSON")
	require.NotEmpty(t, d.UID)
	var exprs []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
		require.NotNil(t, p.Datasource, "panel %q", p.Title)
		require.Equal(t, "prometheus", p.Datasource.UID, "panel %q uses the provisioned datasource", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// Every metric the Grafana dashboard queries exists: ours in the
// registries the binaries build (histograms by their _bucket, _sum and
// _count series), NATS's in what prometheus-nats-exporter exports.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	exprs := dashboardExprs(t, filepath.Join("grafana", "dashboards", "jetfleet.json"))
	ours := ourMetrics(t)
	exists := func(name string) bool {
		if name == "up" || ours[name] || slices.Contains(natsExporterMetrics, name) {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && ours[base] {
				return true
			}
		}
		return false
	}
	var missing []string
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, m := range queriedMetrics(e) {
			seen[m] = true
			if !exists(m) {
				missing = append(missing, fmt.Sprintf("%s (in %s)", m, e))
			}
		}
	}
	require.Empty(t, missing, "the dashboard queries metrics nobody exports")
	// The dashboard covers each part of the fleet.
	for _, want := range []string{"jetfleet_coordinator_items_published_total", "jetfleet_agent_items_total",
		"jetfleet_agent_retries_total", "jetfleet_retry_budget_claims_total", "jetstream_consumer_num_pending"} {
		require.True(t, seen[want], "the dashboard shows %s", want)
	}
}

func readYAML(t *testing.T, path string, v any) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, v), path)
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Profiles    []string          `yaml:"profiles"`
	Container   string            `yaml:"container_name"`
	Hostname    string            `yaml:"hostname"`
}

func loadCompose(t *testing.T) map[string]composeService {
	var c struct {
		Services map[string]composeService `yaml:"services"`
	}
	readYAML(t, filepath.Join("..", "docker-compose.yml"), &c)
	return c.Services
}

// The compose file: three NATS nodes with their own config and volume, a
// two coordinators at 3 replicas, a scalable agent service, each process with
// its own nkey and the CA, and monitoring only in its profile.
func TestComposeFile(t *testing.T) {
	svcs := loadCompose(t)
	init, err := auth.Init(auth.Options{Dir: t.TempDir(), TLS: true})
	require.NoError(t, err)
	written := map[string]bool{}
	for _, f := range init.Files {
		written[filepath.Base(f)] = true
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		s, ok := svcs[name]
		require.True(t, ok, name)
		require.Contains(t, s.Command, "/etc/nats/cluster/"+name+".conf")
		require.FileExists(t, filepath.Join("nats", name+".conf"))
		require.Contains(t, s.Volumes, name+"-data:/data")
		require.Empty(t, s.Profiles)
	}
	for _, name := range []string{"coordinator-1", "coordinator-2", "agent"} {
		s := svcs[name]
		require.NotEmpty(t, s.Environment["NATS_NKEY"], name)
		require.Equal(t, "/auth/ca.pem", s.Environment["NATS_TLS_CA"], name)
		require.Contains(t, s.Environment["NATS_URL"], "tls://nats-3:4222", name)
		for _, v := range s.Volumes {
			// ${FLEET_AUTH_DIR:-./deploy/auth}/<file>:/auth/<file>:ro
			file := filepath.Base(strings.SplitN(strings.SplitN(v, "}/", 2)[1], ":", 2)[0])
			require.True(t, written[file], "%s mounts %s, which auth init does not write", name, file)
		}
	}
	for _, name := range []string{"coordinator-1", "coordinator-2"} {
		require.Equal(t, "3", svcs[name].Environment["FLEET_REPLICAS"], name)
		require.Equal(t, "${FLEET_POOLS:-default}", svcs[name].Environment["FLEET_POOLS"], name)
		require.Equal(t, name, svcs[name].Hostname, "the hostname names the coordinator in the lease")
	}
	require.Empty(t, svcs["agent"].Ports, "agents scale: no fixed host port")
	require.Empty(t, svcs["agent"].Container, "agents scale: no fixed container name")
	for _, name := range []string{"prometheus", "grafana", "nats-exporter-1", "nats-exporter-2", "nats-exporter-3"} {
		require.Equal(t, []string{"monitoring"}, svcs[name].Profiles, name)
	}
}

// The node configuration parses with what auth init writes, as nats-server
// -c reads it in the container, and forms one JetStream cluster.
func TestNATSNodeConfig(t *testing.T) {
	root := t.TempDir()
	// The container's layout: /etc/nats/cluster and /etc/nats/auth.
	cluster := filepath.Join(root, "cluster")
	require.NoError(t, os.MkdirAll(cluster, 0o755))
	for _, f := range []string{"cluster.conf", "nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		data, err := os.ReadFile(filepath.Join("nats", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(cluster, f), data, 0o644))
	}
	authDir := filepath.Join(root, "auth")
	_, err := auth.Init(auth.Options{Dir: authDir, TLS: true})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		o, err := server.ProcessConfigFile(filepath.Join(cluster, fmt.Sprintf("nats-%d.conf", i)))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("nats-%d", i), o.ServerName)
		require.True(t, o.JetStream)
		require.Equal(t, "/data", o.StoreDir)
		require.True(t, o.SyncAlways, "sync_interval: always (docs/deploy.md, Durability): a PubAck means the write is on disk")
		require.Equal(t, "jetfleet", o.Cluster.Name)
		require.Equal(t, 2*time.Second, o.Cluster.PingInterval, "a cut-off node's routes go within seconds (docs/deploy.md, Faults)")
		require.True(t, o.Cluster.NoAdvertise, "clients keep to the node names they were given (docs/deploy.md, Faults)")
		require.Equal(t, 5*time.Second, o.PingInterval, "a paused or cut-off client goes within 20 s (docs/deploy.md, Faults)")
		require.Len(t, o.Routes, 3)
		require.NotNil(t, o.TLSConfig, "client TLS from tls.conf")
		var accounts []string
		for _, a := range o.Accounts {
			accounts = append(accounts, a.Name)
		}
		require.Contains(t, accounts, auth.DefaultAccount)
		require.Len(t, o.Nkeys, 4, "coordinator, agent-default, submitter, operator")
		node := fmt.Sprintf("nats-%d", i)
		// Monitoring and routes listen on the node's address on their
		// network only; routes need the password.
		require.Equal(t, node+"-monitoring", o.HTTPHost)
		require.Equal(t, 8222, o.HTTPPort)
		require.Equal(t, node+"-cluster", o.Cluster.Host)
		require.Equal(t, 6222, o.Cluster.Port)
		require.Equal(t, "hub", o.JetStreamDomain, "agents behind a leaf name the hub's domain")
		require.Equal(t, node+"-wan", o.LeafNode.Host, "leaf links on the wan network only")
		require.Equal(t, 7422, o.LeafNode.Port)
		require.True(t, o.LeafNode.NoAdvertise)
		require.NotNil(t, o.LeafNode.TLSConfig, "leaf links over TLS (leaf-tls.conf)")
		require.Equal(t, auth.RouteUser, o.Cluster.Username)
		require.GreaterOrEqual(t, len(o.Cluster.Password), 32)
		require.Len(t, o.Routes, 3)
		for j, r := range o.Routes {
			require.Equal(t, fmt.Sprintf("nats-%d-cluster:6222", j+1), r.Host)
			pw, _ := r.User.Password()
			require.Equal(t, o.Cluster.Password, pw, "routes carry the route password")
		}
	}
}

// composeNetworks is the networks part of the compose file.
type composeNetworks struct {
	Networks map[string]struct {
		Internal bool `yaml:"internal"`
	} `yaml:"networks"`
	Services map[string]struct {
		Networks yaml.Node `yaml:"networks"`
	} `yaml:"services"`
}

// serviceNetworks returns the networks of each service, with the aliases
// it has on each ("default" when it names none).
func serviceNetworks(t *testing.T) (map[string]map[string][]string, map[string]bool) {
	var c composeNetworks
	readYAML(t, filepath.Join("..", "docker-compose.yml"), &c)
	internal := map[string]bool{}
	for n, v := range c.Networks {
		internal[n] = v.Internal
	}
	out := map[string]map[string][]string{}
	for name, svc := range c.Services {
		nets := map[string][]string{}
		switch svc.Networks.Kind {
		case 0:
			nets["default"] = nil
		case yaml.SequenceNode:
			var list []string
			require.NoError(t, svc.Networks.Decode(&list))
			for _, n := range list {
				nets[n] = nil
			}
		case yaml.MappingNode:
			var m map[string]struct {
				Aliases []string `yaml:"aliases"`
			}
			require.NoError(t, svc.Networks.Decode(&m))
			for n, v := range m {
				nets[n] = v.Aliases
			}
		}
		out[name] = nets
	}
	return out, internal
}

// Where job code runs (agents), neither the NATS monitoring port nor the
// cluster port is reachable: each node binds them to its alias on the
// monitoring and cluster networks (TestNATSNodeConfig), and no agent or
// coordinator is on either network. The cluster network is internal and
// holds the NATS nodes only.
func TestComposeNetworksKeepMonitoringAndRoutesFromJobs(t *testing.T) {
	nets, internal := serviceNetworks(t)
	require.True(t, internal["cluster"], "the cluster network is internal")
	for i := 1; i <= 3; i++ {
		node := fmt.Sprintf("nats-%d", i)
		require.Contains(t, nets[node], "fleet", node)
		require.Equal(t, []string{node + "-cluster"}, nets[node]["cluster"], node)
		require.Equal(t, []string{node + "-monitoring"}, nets[node]["monitoring"], node)
	}
	for name, n := range nets {
		if strings.HasPrefix(name, "nats-") && !strings.HasPrefix(name, "nats-exporter") {
			continue
		}
		require.NotContains(t, n, "cluster", "%s is on the cluster network", name)
		require.NotContains(t, n, "default", "%s is on compose's default network, which every service shares", name)
	}
	for _, name := range []string{"agent", "coordinator-1", "coordinator-2"} {
		require.Equal(t, map[string][]string{"fleet": nil}, nets[name], name)
	}
	for _, name := range []string{"nats-exporter-1", "nats-exporter-2", "nats-exporter-3", "grafana"} {
		require.Equal(t, map[string][]string{"monitoring": nil}, nets[name], name)
	}
	svcs := loadCompose(t)
	for i := 1; i <= 3; i++ {
		require.Contains(t, svcs[fmt.Sprintf("nats-exporter-%d", i)].Command, fmt.Sprintf("http://nats-%d-monitoring:8222", i))
	}
}

// captureLog records a server's error lines.
type captureLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *captureLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}
func (l *captureLog) Noticef(string, ...any)         {}
func (l *captureLog) Warnf(format string, v ...any)  { l.add(format, v...) }
func (l *captureLog) Fatalf(format string, v ...any) { l.add(format, v...) }
func (l *captureLog) Errorf(format string, v ...any) { l.add(format, v...) }
func (l *captureLog) Debugf(string, ...any)          {}
func (l *captureLog) Tracef(string, ...any)          {}
func (l *captureLog) has(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			return true
		}
	}
	return false
}

// startNode starts a server from a configuration whose cluster block
// includes routes (a routes.conf) or, when routes is "", names rogueRoute.
func startNode(t *testing.T, dir, name string, port int, routesConf, rogueRoute string) (*server.Server, *captureLog) {
	t.Helper()
	cluster := fmt.Sprintf("include %q", filepath.Base(routesConf)) // relative to the including file
	if routesConf == "" {
		cluster = fmt.Sprintf("routes: [%q]", rogueRoute)
	}
	conf := filepath.Join(dir, name+".conf")
	body := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:-1\ncluster {\n  name: jetfleet\n  listen: \"127.0.0.1:%d\"\n  %s\n}\n", name, port, cluster)
	require.NoError(t, os.WriteFile(conf, []byte(body), 0o644))
	o, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	o.NoSigs, o.NoLog = true, false
	s, err := server.NewServer(o)
	require.NoError(t, err)
	l := &captureLog{}
	s.SetLogger(l, false, false)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(s.Shutdown)
	return s, l
}

// routes.conf keeps the cluster closed: nodes with it form the cluster; a
// server without the route password (job code that reached the cluster
// port) is refused and never joins.
func TestRouteAuthorizationRefusesAStranger(t *testing.T) {
	dir := t.TempDir()
	p1, p2 := fleettest.FreePort(t), fleettest.FreePort(t)
	_, err := auth.Init(auth.Options{Dir: dir, Routes: []string{fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("127.0.0.1:%d", p2)}})
	require.NoError(t, err)
	routes := filepath.Join(dir, auth.RoutesFile)
	a, alog := startNode(t, dir, "a", p1, routes, "")
	b, _ := startNode(t, dir, "b", p2, routes, "")
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if a.NumRoutes() < 1 || b.NumRoutes() < 1 {
			return fmt.Errorf("routes: a %d, b %d", a.NumRoutes(), b.NumRoutes())
		}
		return nil
	})
	stranger, _ := startNode(t, dir, "stranger", fleettest.FreePort(t), "", fmt.Sprintf("nats-route://127.0.0.1:%d", p1))
	fleettest.WaitFor(t, 30*time.Second, func() error {
		if !alog.has("authentication error") {
			return errors.New("node a has not refused the stranger yet")
		}
		return nil
	})
	require.Zero(t, stranger.NumRoutes(), "the stranger joined the cluster")
	routez, err := a.Routez(nil)
	require.NoError(t, err)
	for _, r := range routez.Routes {
		require.NotEqual(t, "stranger", r.RemoteName, "the stranger is routed to node a")
	}
}

// Prometheus scrapes the coordinator and every agent where the compose
// file serves /metrics, and one exporter per NATS node.
func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join("prometheus", "prometheus.yml"), &cfg)
	svcs := loadCompose(t)
	port := func(svc string) string {
		addr := svcs[svc].Environment["FLEET_METRICS_ADDR"]
		require.NotEmpty(t, addr, "%s serves /metrics", svc)
		return strings.TrimPrefix(addr, ":")
	}
	jobs := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			jobs[sc.JobName] = append(jobs[sc.JobName], s.Targets...)
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				jobs[sc.JobName] = append(jobs[sc.JobName], fmt.Sprintf("%s:%d", n, d.Port))
			}
		}
	}
	require.Equal(t, []string{"coordinator-1:" + port("coordinator-1"), "coordinator-2:" + port("coordinator-2")}, jobs["jetfleet-coordinator"])
	require.Equal(t, []string{"agent:" + port("agent")}, jobs["jetfleet-agent"])
	var exporters []string
	for name := range svcs {
		if strings.HasPrefix(name, "nats-exporter-") {
			exporters = append(exporters, name+":7777")
		}
	}
	slices.Sort(exporters)
	require.Len(t, exporters, 3)
	require.Equal(t, exporters, jobs["nats"])

	// Grafana's provisioning points at this Prometheus and the dashboards.
	var ds struct {
		Datasources []struct {
			UID string `yaml:"uid"`
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join("grafana", "provisioning", "datasources", "prometheus.yml"), &ds)
	require.Len(t, ds.Datasources, 1)
	require.Equal(t, "prometheus", ds.Datasources[0].UID)
	require.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL)
	var dp struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join("grafana", "provisioning", "dashboards", "jetfleet.yml"), &dp)
	require.Len(t, dp.Providers, 1)
	require.Contains(t, svcs["grafana"].Volumes, "./deploy/grafana/dashboards:"+dp.Providers[0].Options.Path+":ro")
}

// The edge profile: site b's leaf server links to the hub from the wan
// network and serves the site's network, where site b's agents are and
// nothing else; they name the hub's JetStream domain.
func TestComposeEdgeProfile(t *testing.T) {
	svcs := loadCompose(t)
	nets, internal := serviceNetworks(t)
	for _, name := range []string{"leaf-site-b", "agent-site-b"} {
		require.Equal(t, []string{"edge"}, svcs[name].Profiles, name)
	}
	require.True(t, internal["site-b"], "the site's network is internal")
	require.Equal(t, map[string][]string{"site-b": nil}, nets["agent-site-b"], "site b's agents reach the leaf only")
	require.Equal(t, map[string][]string{"wan": nil, "site-b": nil}, nets["leaf-site-b"])
	for i := 1; i <= 3; i++ {
		node := fmt.Sprintf("nats-%d", i)
		require.Equal(t, []string{node + "-wan"}, nets[node]["wan"], node)
	}
	for name, n := range nets {
		if name != "leaf-site-b" && name != "agent-site-b" {
			require.NotContains(t, n, "site-b", "%s is on site b's network", name)
		}
	}
	a := svcs["agent-site-b"]
	require.Equal(t, "hub", a.Environment["FLEET_JS_DOMAIN"])
	require.Equal(t, "nats://leaf-site-b:4222", a.Environment["NATS_URL"])
	require.Equal(t, "site-b", a.Environment["FLEET_POOL"])
	require.Empty(t, a.Container, "agents scale: no fixed container name")
}

// The leaf server's configuration parses with what `auth init --tls --leaf
// site-b --js-domain hub` writes: no JetStream of its own, site b's agent
// user, and a TLS link to the three hub nodes as leaf-site-b.
func TestLeafConfig(t *testing.T) {
	root := t.TempDir()
	leafDir := filepath.Join(root, "leaf")
	require.NoError(t, os.MkdirAll(leafDir, 0o755))
	data, err := os.ReadFile(filepath.Join("leaf", "leaf-site-b.conf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(leafDir, "leaf-site-b.conf"), data, 0o644))
	res, err := auth.Init(auth.Options{Dir: filepath.Join(root, "auth"), TLS: true, Leaves: []string{"site-b"}, JSDomain: "hub"})
	require.NoError(t, err)
	o, err := server.ProcessConfigFile(filepath.Join(leafDir, "leaf-site-b.conf"))
	require.NoError(t, err)
	require.Equal(t, "leaf-site-b", o.ServerName)
	require.False(t, o.JetStream)
	require.Equal(t, 5*time.Second, o.PingInterval, "a silent link is given up within 20 s")
	require.Len(t, o.LeafNode.Remotes, 1)
	r := o.LeafNode.Remotes[0]
	require.Len(t, r.URLs, 3)
	require.Equal(t, "nats-1:7422", r.URLs[0].Host)
	require.NotNil(t, r.TLSConfig, "the link is TLS, verified with the fleet's CA")
	require.Equal(t, auth.DefaultAccount, r.LocalAccount)
	require.NotEmpty(t, r.Nkey)
	require.Len(t, o.Nkeys, 1, "site b's agent user only")
	var agentKey string
	for _, u := range res.Users {
		if u.Name == auth.AgentUser("site-b") {
			agentKey = u.NKey
		}
	}
	require.Equal(t, agentKey, o.Nkeys[0].Nkey)
}
