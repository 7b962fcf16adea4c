package otelx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ProtocolHTTP is the one OTLP protocol exported (OTLP over HTTP with
// protobuf bodies), named as OTEL_EXPORTER_OTLP_PROTOCOL names it. The
// gRPC exporter is left out on purpose, to keep the dependency set to one
// exporter module: every OpenTelemetry collector serves OTLP/HTTP (port
// 4318).
const ProtocolHTTP = "http/protobuf"

// DefaultServiceName is the resource's service.name unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) names another.
const DefaultServiceName = "differential"

// failureLogInterval bounds how often failed exports are logged.
const failureLogInterval = 30 * time.Second

// Config is what `run`'s tracing flags set.
type Config struct {
	// Endpoint is the OTLP/HTTP receiver's URL: http://host:port (plain
	// text) or https://host:port. A URL without a path is sent to
	// /v1/traces (as OTEL_EXPORTER_OTLP_ENDPOINT is); a path is used as
	// given (as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is).
	Endpoint string
	// SampleRatio is the share of traces recorded, in [0, 1].
	SampleRatio float64
	// ParentBased: a record whose traceparent carries a sampling decision
	// follows it, and SampleRatio applies only to records without one.
	// Otherwise SampleRatio applies to every record (by trace id, so every
	// service with the same ratio keeps the same traces).
	ParentBased bool
	// ServiceVersion is the resource's service.version ("" for none).
	ServiceVersion string
	// Logger receives export failures. Default: discard.
	Logger *slog.Logger
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if _, err := endpointURL(c.Endpoint); err != nil {
		return err
	}
	if !(c.SampleRatio >= 0 && c.SampleRatio <= 1) {
		return fmt.Errorf("sample ratio must be in [0, 1], got %v", c.SampleRatio)
	}
	return nil
}

// endpointURL parses the endpoint and, for HTTP, completes an empty path.
func endpointURL(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q must be a URL http://host:port or https://host:port (e.g. http://localhost:4318, the collector's OTLP/HTTP port)", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u, nil
}

// Sampler is the sampler c describes.
func (c Config) Sampler() sdktrace.Sampler {
	s := sdktrace.TraceIDRatioBased(c.SampleRatio)
	if c.ParentBased {
		return sdktrace.ParentBased(s)
	}
	return s
}

// NewProvider returns a TracerProvider exporting to c.Endpoint. Shut it
// down (with a deadline) when the chain has stopped: that flushes the
// spans still queued.
func NewProvider(ctx context.Context, c Config) (*sdktrace.TracerProvider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	u, _ := endpointURL(c.Endpoint)
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", c.Endpoint, err)
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(DefaultServiceName))}
	if c.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(c.ServiceVersion)))
	}
	// Later options win: the environment over the defaults above.
	res, err := resource.New(ctx, append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(&loggingExporter{SpanExporter: exp, log: log, endpoint: c.Endpoint}),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(c.Sampler()),
	), nil
}

// loggingExporter logs failed exports itself (rate-limited), so they reach
// the process's logger instead of OpenTelemetry's global error handler.
type loggingExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string

	mu     sync.Mutex
	last   time.Time
	failed int // spans not exported since the last log line
}

func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.mu.Lock()
	e.failed += len(spans)
	now := time.Now()
	if now.Sub(e.last) < failureLogInterval {
		e.mu.Unlock()
		return nil
	}
	n := e.failed
	e.failed, e.last = 0, now
	e.mu.Unlock()
	e.log.Warn("tracing: spans not exported", "endpoint", e.endpoint, "spans", n, "err", err)
	return nil
}
