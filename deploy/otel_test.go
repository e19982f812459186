package deploy_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Traces: the coordinators and agents take the OTLP endpoint from the
// environment (off while it is empty), and the monitoring profile's
// collector receives OTLP/HTTP on 4318, on the network they are on, with
// a traces pipeline.
func TestComposeSendsTracesToTheCollector(t *testing.T) {
	svcs := loadCompose(t)
	for _, name := range []string{"coordinator-1", "coordinator-2", "agent"} {
		require.Equal(t, "${OTEL_EXPORTER_OTLP_ENDPOINT:-}", svcs[name].Environment["OTEL_EXPORTER_OTLP_ENDPOINT"], name)
	}
	col, ok := svcs["otel-collector"]
	require.True(t, ok)
	require.Equal(t, []string{"monitoring"}, col.Profiles)
	require.Contains(t, col.Volumes, "./deploy/otel/collector.yaml:/etc/otelcol/collector.yaml:ro")
	nets, _ := serviceNetworks(t)
	require.Contains(t, nets["otel-collector"], "fleet", "the agents reach it")

	var cfg struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct {
						Endpoint string `yaml:"endpoint"`
					} `yaml:"http"`
				} `yaml:"protocols"`
			} `yaml:"otlp"`
		} `yaml:"receivers"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `yaml:"receivers"`
				Exporters []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	readYAML(t, filepath.Join("otel", "collector.yaml"), &cfg)
	require.Equal(t, "0.0.0.0:4318", cfg.Receivers.OTLP.Protocols.HTTP.Endpoint)
	require.Equal(t, []string{"otlp"}, cfg.Service.Pipelines["traces"].Receivers)
	require.NotEmpty(t, cfg.Service.Pipelines["traces"].Exporters)
}
