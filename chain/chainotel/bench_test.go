package chainotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainotel"
	"github.com/differential-dev/differential/chain/chaintest"
)

// untraced is a tracer installed but leaving every record untraced (Start
// returns nil): the chain's own cost of the hooks, without OpenTelemetry.
type untraced struct{}

func (untraced) Start(string, *chain.Event) chain.RecordSpan { return nil }

// BenchmarkTracing measures the engine's cost per record through 3 stages
// that each process every record and emit one output (the in-memory
// source and producer, no Kafka), with tracing:
//
//   - off: no tracer, as `differential run` without --otlp-endpoint;
//   - untraced: a tracer whose Start returns nil (the hooks' own cost);
//   - unsampled: chainotel over the SDK, sampler ratio 0: spans are not
//     recorded but their context is still propagated into the outputs;
//   - sampled: every span recorded, ended and handed to a span processor
//     that exports to nowhere (the SDK's cost without the network).
//
// ns/op is per record (3 stage spans per record when traced). The ratio
// of off to the others is the cost of tracing; off against the same
// benchmark before the hooks existed is BenchmarkChainStages' job (the
// hooks are one nil check per record and stage when off).
func BenchmarkTracing(b *testing.B) {
	sampledTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	unsampledTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.TraceIDRatioBased(0)))
	for _, c := range []struct {
		name   string
		tracer chain.Tracer
	}{
		{"off", nil},
		{"untraced", untraced{}},
		{"unsampled", chainotel.New(unsampledTP)},
		{"sampled", chainotel.New(sampledTP)},
	} {
		b.Run(c.name, func(b *testing.B) {
			emit := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
				pc.Emit(chain.Message{Key: e.Key, Value: e.Value})
				return nil
			})
			stages := make([]chain.Stage, 3)
			for i := range stages {
				stages[i] = chain.Stage{Name: fmt.Sprintf("s%d", i), Processor: emit}
			}
			opts := []chain.Option{chain.WithBufferSize(8192), chain.WithBatchSize(256), chain.WithIdleTimeout(time.Millisecond)}
			if c.tracer != nil {
				opts = append(opts, chain.WithTracer(c.tracer))
			}
			tt := chaintest.New(b, stages, benchDecoder, opts...)
			tt.DiscardOutputs()
			tt.Log(0).SetMaxBatch(512)
			recs := make([]chain.Record, b.N)
			key := []byte("k")
			for i := range recs {
				recs[i] = chain.Record{Key: key, Value: key, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			}
			tt.Log(0).Append(recs...)
			tt.Measure(b)
		})
	}
}

var benchDecoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	return chain.Decoded{Type: "x", Time: r.Timestamp}, nil
})
