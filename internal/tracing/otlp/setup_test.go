package otlp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/jetfleet/jetfleet/internal/tracing"
	"github.com/jetfleet/jetfleet/internal/tracing/otlp"
)

func TestConfigured(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr string
	}{
		{"nothing set", nil, false, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, ""},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true, ""},
		{"otlp exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"another exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := otlp.Configured(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// Spans reach an OTLP/HTTP receiver at OTEL_EXPORTER_OTLP_ENDPOINT, with
// the service name of OTEL_SERVICE_NAME.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	var (
		mu   sync.Mutex
		reqs []*collectortrace.ExportTraceServiceRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs = append(reqs, &req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		data, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "jetfleet-test")

	ctx := context.Background()
	tp, shutdown, err := otlp.Setup(ctx, "jetfleet-agent", os.Getenv)
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tracing.New(tp).Start(ctx, tracing.SpanItem, trace.SpanKindConsumer, tracing.AttrJobID.String("j1"))
	span.End()
	require.NoError(t, shutdown(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reqs, 1)
	rs := reqs[0].GetResourceSpans()
	require.Len(t, rs, 1)
	var service string
	for _, kv := range rs[0].GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	require.Equal(t, "jetfleet-test", service)
	spans := rs[0].GetScopeSpans()[0].GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, tracing.SpanItem, spans[0].GetName())
	require.Equal(t, "j1", spans[0].GetAttributes()[0].GetValue().GetStringValue())
}

// Not configured: no provider, and the zero Tracer's spans record
// nothing.
func TestSetupOff(t *testing.T) {
	tp, shutdown, err := otlp.Setup(context.Background(), "x", func(string) string { return "" })
	require.NoError(t, err)
	require.Nil(t, tp)
	require.NoError(t, shutdown(context.Background()))
	_, span := tracing.New(nil).Start(context.Background(), "s", trace.SpanKindInternal)
	require.False(t, span.IsRecording())
}
