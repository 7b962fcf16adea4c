package main

import (
	"context"
	"flag"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainotel"
	"github.com/differential-dev/differential/internal/otelx"
)

// tracingFlags are run's OpenTelemetry settings: off unless --otlp-endpoint
// (or DIFFERENTIAL_OTLP_ENDPOINT, the file's otlp-endpoint, or the standard
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT) names
// a collector.
type tracingFlags struct {
	endpoint    string
	ratio       float64
	parentBased bool
	// set: which of the flags the command line, environment or file set.
	set map[string]bool
	// otel is what the standard OTEL_* variables said (applyOTelEnv);
	// otelErr the value they carry that tracing cannot honour, reported
	// only when tracing is on.
	otel    otelx.Env
	otelErr error
}

var tracingDependents = []string{"trace-sample-ratio", "trace-parent-based"}

func defaultTracingFlags() tracingFlags {
	return tracingFlags{ratio: 1, parentBased: true}
}

func (t *tracingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.endpoint, "otlp-endpoint", t.endpoint,
		"trace every record through the stages: export OpenTelemetry spans over OTLP/HTTP to this `URL` (http://host:4318, https:// for TLS; default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT); empty: tracing off")
	fs.Float64Var(&t.ratio, "trace-sample-ratio", t.ratio,
		"share of traces recorded, a `ratio` in [0, 1]; records whose traceparent is sampled or not follow it, unless --trace-parent-based=false")
	fs.BoolVar(&t.parentBased, "trace-parent-based", t.parentBased,
		"follow the sampling decision of the input record's traceparent (false: --trace-sample-ratio decides for every record)")
}

// noteSet records which tracing flags were given (after the file), then
// fills the others from the standard OTEL_* variables: they come after the
// command line, DIFFERENTIAL_* variables and the file, before the defaults.
func (t *tracingFlags) noteSet(fs *flag.FlagSet, lookup func(string) (string, bool)) {
	t.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { t.set[f.Name] = true })
	t.otel, t.otelErr = otelx.ReadEnv(lookup)
	if !t.set["otlp-endpoint"] {
		t.endpoint = t.otel.Endpoint
	}
	if t.otelErr != nil {
		return // reported by validate when tracing is on
	}
	if t.otel.SampleRatio != nil && !t.set["trace-sample-ratio"] {
		t.ratio = *t.otel.SampleRatio
	}
	if t.otel.ParentBased != nil && !t.set["trace-parent-based"] {
		t.parentBased = *t.otel.ParentBased
	}
}

// noteSources records, in src, the tracing flags that noteSet filled from
// the OTEL_* variables.
func (t *tracingFlags) noteSources(src sources) {
	if !t.set["otlp-endpoint"] && t.otel.EndpointVar != "" {
		src["otlp-endpoint"] = source{kind: fromEnv, where: t.otel.EndpointVar}
	}
	if t.otelErr != nil {
		return
	}
	if t.otel.SampleRatio != nil && !t.set["trace-sample-ratio"] {
		src["trace-sample-ratio"] = source{kind: fromEnv, where: "OTEL_TRACES_SAMPLER_ARG"}
	}
	if t.otel.ParentBased != nil && !t.set["trace-parent-based"] {
		src["trace-parent-based"] = source{kind: fromEnv, where: "OTEL_TRACES_SAMPLER"}
	}
}

// on: tracing runs (an endpoint, and not disabled by OTEL_SDK_DISABLED or
// OTEL_TRACES_EXPORTER=none).
func (t *tracingFlags) on() bool { return t.endpoint != "" && !t.otel.Disabled }

func (t *tracingFlags) config(log *slog.Logger) otelx.Config {
	return otelx.Config{
		Endpoint: t.endpoint, SampleRatio: t.ratio, ParentBased: t.parentBased,
		ServiceVersion: moduleVersion(), Logger: log,
	}
}

func (t *tracingFlags) validate() error {
	if t.endpoint == "" {
		for _, f := range tracingDependents {
			if t.set[f] {
				return usagef("--%s needs --otlp-endpoint (tracing is off without it)", f)
			}
		}
		return nil
	}
	if t.otel.Disabled {
		return nil // off: the settings are not used
	}
	if t.otelErr != nil {
		return usagef("%v", t.otelErr)
	}
	if err := t.config(nil).Validate(); err != nil {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "OTLP endpoint") && !t.set["otlp-endpoint"]:
			return usagef("%s: %s", t.otel.EndpointVar, msg)
		case strings.HasPrefix(msg, "OTLP endpoint"):
			return usagef("--otlp-endpoint: %s", msg)
		case strings.HasPrefix(msg, "sample ratio"):
			return usagef("--trace-sample-ratio: %s", msg)
		}
		return usagef("%s", msg)
	}
	return nil
}

// start builds the tracer of the chain when tracing is on: the chain's
// option, and a stop that flushes the spans still queued (waiting at most
// tracingFlushTimeout). Off, it returns no option and a no-op stop.
func (t *tracingFlags) start(ctx context.Context, group string, log *slog.Logger) ([]chain.Option, func(), error) {
	if !t.on() {
		if t.endpoint != "" {
			log.Info("tracing off", "because", t.otel.DisabledBy, "otlp_endpoint", t.endpoint)
		}
		return nil, func() {}, nil
	}
	tp, err := otelx.NewProvider(ctx, t.config(log))
	if err != nil {
		return nil, nil, err
	}
	log.Info("tracing on", "otlp_endpoint", t.endpoint, "sample_ratio", t.ratio, "parent_based", t.parentBased)
	stop := func() {
		// Not ctx: it has ended when run stops cleanly.
		sctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing the last spans", "err", err)
		}
	}
	return []chain.Option{chain.WithTracer(chainotel.New(tp, chainotel.WithConsumerGroup(group)))}, stop, nil
}

// tracingFlushTimeout bounds the final export of queued spans at exit.
const tracingFlushTimeout = 5 * time.Second

// moduleVersion is the module's version from the build information.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return ""
}
