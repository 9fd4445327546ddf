package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/observe"
)

// TelemetryConfig turns on OpenTelemetry traces, exported over OTLP/HTTP.
// Off unless OTLPEndpoint is set or an OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variable is; the other OTEL_*
// variables of the exporter and the SDK (headers, timeout, sampler,
// resource attributes) are honoured, and OTEL_SDK_DISABLED=true turns it
// off.
type TelemetryConfig struct {
	// OTLPEndpoint is the collector's OTLP/HTTP URL, such as
	// http://localhost:4318 (spans go to its /v1/traces).
	OTLPEndpoint string `yaml:"otlp_endpoint" env:"AGENTHOST_OTLP_ENDPOINT"`
	// ServiceName is the service.name of the spans (default agenthost;
	// OTEL_SERVICE_NAME wins).
	ServiceName string `yaml:"service_name" env:"AGENTHOST_SERVICE_NAME"`
}

func (t TelemetryConfig) enabled(env func(string) (string, bool)) bool {
	if v, _ := env("OTEL_SDK_DISABLED"); strings.EqualFold(v, "true") {
		return false
	}
	if t.OTLPEndpoint != "" {
		return true
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, ok := env(k); ok && v != "" {
			return true
		}
	}
	return false
}

func (t TelemetryConfig) validate() error {
	if t.OTLPEndpoint != "" && !strings.HasPrefix(t.OTLPEndpoint, "http://") && !strings.HasPrefix(t.OTLPEndpoint, "https://") {
		return fmt.Errorf("telemetry.otlp_endpoint %q: want an http:// or https:// URL (OTLP over HTTP, e.g. http://localhost:4318)", t.OTLPEndpoint)
	}
	return nil
}

// telemetry is serve's tracing: nil fields when it is off.
type telemetry struct {
	sdk    *sdktrace.TracerProvider
	tracer *observe.Tracer
}

// provider is the tracer provider for the HTTP server spans, nil when off.
func (t telemetry) provider() trace.TracerProvider {
	if t.sdk == nil {
		return nil
	}
	return t.sdk
}

// startTelemetry starts the exporter when tracing is on.
func startTelemetry(ctx context.Context, cfg TelemetryConfig, log *slog.Logger) (telemetry, error) {
	if !cfg.enabled(os.LookupEnv) {
		return telemetry{}, nil
	}
	var opts []otlptracehttp.Option
	if cfg.OTLPEndpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.OTLPEndpoint, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return telemetry{}, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "agenthost"
	}
	version, _ := httpapi.Version()
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", version)))
	if err != nil {
		return telemetry{}, fmt.Errorf("telemetry: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the above.
	if envRes, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, envRes); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info("traces exported over OTLP/HTTP", "endpoint", cmpOr(cfg.OTLPEndpoint, "from OTEL_* environment"), "service", name)
	return telemetry{sdk: tp, tracer: observe.NewTracer(tp)}, nil
}

// shutdown flushes the spans still buffered.
func (t telemetry) shutdown(log *slog.Logger) {
	if t.sdk == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.sdk.Shutdown(ctx); err != nil {
		log.Warn("telemetry: flushing the spans failed", "err", err)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
