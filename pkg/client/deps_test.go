package client_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// forbidden are the packages (or prefixes) of the daemons that a service
// which only submits jobs must not compile in.
var forbidden = []string{
	"go.yaml.in/yaml", "gopkg.in/yaml", "sigs.k8s.io/yaml", // job specs in YAML
	"github.com/theory/jsonpath", // JSONPath
	"github.com/robfig/cron",     // cron
	"github.com/prometheus/",
	"github.com/rs/zerolog",
	"github.com/nats-io/nats.go/micro",
	"go.opentelemetry.io/otel/sdk", "google.golang.org/grpc", // the trace exporter: a submitter records spans only
	"github.com/jetfleet/jetfleet/internal/expand",
	"github.com/jetfleet/jetfleet/internal/schedule",
	"github.com/jetfleet/jetfleet/internal/dlq",
	"github.com/jetfleet/jetfleet/internal/ui",
	"github.com/jetfleet/jetfleet/internal/simulate",
	"github.com/jetfleet/jetfleet/pkg/coordinator",
	"github.com/jetfleet/jetfleet/pkg/agent",
	"github.com/jetfleet/jetfleet/pkg/jobspec",
}

// TestDependencies: a submitter imports the client and nothing of the
// daemons (docs/design.md, "Public API").
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/nats-io/nats.go")
	for _, dep := range deps {
		for _, bad := range forbidden {
			require.False(t, dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/"),
				"package client depends on %s (%s): a submitter must not compile in the daemons' dependencies", dep, bad)
		}
	}
}
