package otelx_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/differential-dev/differential/internal/otelx"
	"github.com/differential-dev/differential/internal/otlptest"
	"github.com/differential-dev/differential/internal/testutil"
)

const waitTimeout = 30 * time.Second

// TestExportsOverHTTP: a span reaches the endpoint over OTLP/HTTP (a URL
// without a path goes to /v1/traces) with the resource's service name,
// flushed by Shutdown.
func TestExportsOverHTTP(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	r, endpoint := otlptest.NewHTTP(t)
	tp, err := otelx.NewProvider(context.Background(), otelx.Config{Endpoint: endpoint, SampleRatio: 1, ParentBased: true, ServiceVersion: "v9"})
	require.NoError(t, err)
	_, sp := tp.Tracer("test").Start(context.Background(), "one")
	sp.End()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, tp.Shutdown(ctx))
	spans := r.Wait(t, waitTimeout, func(s []otlptest.Span) bool { return len(s) > 0 })
	require.Len(t, spans, 1)
	require.Equal(t, "one", spans[0].Name)
	require.Equal(t, otelx.DefaultServiceName, spans[0].Service)
	require.Equal(t, sp.SpanContext().TraceID().String(), spans[0].TraceID)
}

// TestServiceNameFromEnvironment: OTEL_SERVICE_NAME overrides the default.
func TestServiceNameFromEnvironment(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "attribution-eu")
	r, endpoint := otlptest.NewHTTP(t)
	tp, err := otelx.NewProvider(context.Background(), otelx.Config{Endpoint: endpoint, SampleRatio: 1})
	require.NoError(t, err)
	_, sp := tp.Tracer("test").Start(context.Background(), "one")
	sp.End()
	require.NoError(t, tp.Shutdown(context.Background()))
	spans := r.Wait(t, waitTimeout, func(s []otlptest.Span) bool { return len(s) > 0 })
	require.Equal(t, "attribution-eu", spans[0].Service)
}

// TestExportFailureIsLogged: an endpoint that refuses the spans costs a
// warning in the process's log, not an error elsewhere; the next failures
// within failureLogInterval are counted, not logged.
func TestExportFailureIsLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retried
	}))
	defer srv.Close()
	var logs testutil.SyncBuffer
	tp, err := otelx.NewProvider(context.Background(), otelx.Config{
		Endpoint: srv.URL, SampleRatio: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for range 2 {
		_, sp := tp.Tracer("test").Start(context.Background(), "one")
		sp.End()
		require.NoError(t, tp.ForceFlush(ctx)) // returns once the export returned
	}
	require.NoError(t, tp.Shutdown(ctx))
	require.Equal(t, 1, strings.Count(logs.String(), "tracing: spans not exported"), logs.String())
	require.Contains(t, logs.String(), "spans=1")
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  otelx.Config
		want string
	}{
		{otelx.Config{Endpoint: "localhost:4318", SampleRatio: 1}, "must be a URL http://host:port"},
		{otelx.Config{Endpoint: "ftp://h:1", SampleRatio: 1}, "must be a URL"},
		{otelx.Config{Endpoint: "http://", SampleRatio: 1}, "must be a URL"},
		{otelx.Config{Endpoint: "http://h:4318", SampleRatio: 1.5}, "sample ratio must be in [0, 1]"},
		{otelx.Config{Endpoint: "http://h:4318", SampleRatio: -0.1}, "sample ratio must be in [0, 1]"},
	} {
		require.ErrorContains(t, c.cfg.Validate(), c.want, "%+v", c.cfg)
	}
	require.NoError(t, otelx.Config{Endpoint: "https://collector.example:4318/v1/traces", SampleRatio: 0}.Validate())
}

// TestSampler: parent-based follows the parent's decision whatever the
// ratio; ratio-only ignores it.
func TestSampler(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	parent := func(sampled bool) context.Context {
		f := trace.TraceFlags(0)
		if sampled {
			f = trace.FlagsSampled
		}
		return trace.ContextWithRemoteSpanContext(context.Background(),
			trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: f, Remote: true}))
	}
	decide := func(c otelx.Config, ctx context.Context) bool {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(c.Sampler()))
		_, sp := tp.Tracer("t").Start(ctx, "s")
		defer sp.End()
		return sp.SpanContext().IsSampled()
	}
	pb0 := otelx.Config{SampleRatio: 0, ParentBased: true}
	require.True(t, decide(pb0, parent(true)), "a sampled parent is followed at ratio 0")
	require.False(t, decide(pb0, parent(false)))
	require.False(t, decide(pb0, context.Background()), "no parent: the ratio decides")
	pb1 := otelx.Config{SampleRatio: 1, ParentBased: true}
	require.False(t, decide(pb1, parent(false)), "an unsampled parent is followed at ratio 1")
	require.True(t, decide(pb1, context.Background()))
	r1 := otelx.Config{SampleRatio: 1}
	require.True(t, decide(r1, parent(false)), "ratio only: the parent's flag is ignored")
	r0 := otelx.Config{SampleRatio: 0}
	require.False(t, decide(r0, parent(true)))
}

func lookup(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestReadEnv: the standard variables choose the endpoint (the traces one
// first), the sampler and its ratio, and disable tracing; values
// differential cannot honour are refused naming the variable.
func TestReadEnv(t *testing.T) {
	e, err := otelx.ReadEnv(lookup(nil))
	require.NoError(t, err)
	require.Equal(t, otelx.Env{}, e, "nothing set: nothing said")

	e, err = otelx.ReadEnv(lookup(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://all:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "http/protobuf",
		"OTEL_TRACES_SAMPLER":                "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":            "0.25",
	}))
	require.NoError(t, err)
	require.Equal(t, "http://traces:4318/v1/traces", e.Endpoint)
	require.Equal(t, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e.EndpointVar)
	require.Equal(t, 0.25, *e.SampleRatio)
	require.True(t, *e.ParentBased)
	require.False(t, e.Disabled)

	e, err = otelx.ReadEnv(lookup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://gw.example/otlp/"}))
	require.NoError(t, err)
	require.Equal(t, "https://gw.example/otlp/v1/traces", e.Endpoint, "a base URL's path gets /v1/traces")
	e, err = otelx.ReadEnv(lookup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}))
	require.NoError(t, err)
	require.Equal(t, "http://c:4318", e.Endpoint, "no path: Config adds /v1/traces")

	for sampler, want := range map[string]struct {
		ratio float64
		pb    bool
	}{
		"always_on": {1, false}, "always_off": {0, false}, "traceidratio": {0.5, false},
		"parentbased_always_on": {1, true}, "PARENTBASED_ALWAYS_OFF": {0, true},
	} {
		e, err := otelx.ReadEnv(lookup(map[string]string{"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": "0.5"}))
		require.NoError(t, err, sampler)
		require.Equal(t, want.ratio, *e.SampleRatio, sampler)
		require.Equal(t, want.pb, *e.ParentBased, sampler)
	}

	for _, v := range []map[string]string{{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}} {
		e, err := otelx.ReadEnv(lookup(v))
		require.NoError(t, err)
		require.True(t, e.Disabled, "%v", v)
		require.Contains(t, e.DisabledBy, "=", "%v", v)
	}

	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": differential exports OTLP over HTTP only (set http/protobuf`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `OTEL_TRACES_EXPORTER="zipkin": differential exports traces over OTLP only`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, `OTEL_TRACES_SAMPLER="jaeger_remote" is not supported: use always_on`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, `OTEL_TRACES_SAMPLER_ARG="half": the sample ratio of traceidratio must be a number in [0, 1]`},
		{map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, `OTEL_TRACES_SAMPLER_ARG="2"`},
	} {
		_, err := otelx.ReadEnv(lookup(c.vars))
		require.ErrorContains(t, err, c.want, "%v", c.vars)
	}
}
