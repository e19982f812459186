// Package otlp sets up jetfleet's processes' trace export (OTLP over HTTP) from
// the standard OTEL_* variables. It is apart from package tracing so that
// what only records spans (the client) does not compile in the SDK and the
// exporter.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Configured reports whether the standard variables ask for traces:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with
// OTEL_TRACES_EXPORTER unset; never with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none.
func Configured(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q: jetfleet exports with otlp (OTLP/HTTP) or none", exp)
	}
}

// Setup builds the tracer provider the standard OTEL_* variables
// describe, for a binary named service (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override it): an OTLP/HTTP exporter (endpoint,
// headers, timeout, TLS from OTEL_EXPORTER_OTLP_*), batched, and the
// sampler of OTEL_TRACES_SAMPLER (default parentbased_always_on: a
// sampled parent's children are sampled, an unsampled one's are not). It
// returns nil and a no-op shutdown when tracing is not configured.
// shutdown flushes the spans still buffered.
func Setup(ctx context.Context, service string, getenv func(string) string, opts ...otlptracehttp.Option) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	on, err := Configured(getenv)
	if err != nil || !on {
		return nil, noop, err
	}
	if getenv("OTEL_EXPORTER_OTLP_PROTOCOL") != "" && getenv("OTEL_EXPORTER_OTLP_PROTOCOL") != "http/protobuf" {
		return nil, noop, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: jetfleet exports http/protobuf", getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(service)), resource.Environment())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, noop, fmt.Errorf("tracing: resource: %w", err)
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
