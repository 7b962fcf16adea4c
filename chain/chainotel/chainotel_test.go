package chainotel_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainotel"
	"github.com/differential-dev/differential/chain/chaintest"
)

// Test records have values "type|eventTimeSeconds" ("bad" is invalid).
var base = time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)

var decoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	typ, secs, ok := strings.Cut(string(r.Value), "|")
	if !ok {
		return chain.Decoded{}, errors.New("no separator")
	}
	n, err := strconv.Atoi(secs)
	if err != nil {
		return chain.Decoded{}, err
	}
	return chain.Decoded{Type: typ, Time: base.Add(time.Duration(n) * time.Second)}, nil
})

func typeIs(typ string) func(*chain.Event) bool {
	return func(e *chain.Event) bool { return e.Type == typ }
}

// emitter emits one output per record, unless the record's key starts with
// "fail" (then it fails for good: dead-lettered); with tp, it also starts a
// span of its own from its context.
func emitter(tp trace.TracerProvider) chain.Processor {
	return chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		if tp != nil {
			_, sp := tp.Tracer("app").Start(ctx, "app work")
			sp.End()
		}
		if strings.HasPrefix(string(e.Key), "fail") {
			return chain.Permanent(errors.New("refused"))
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s@%d", pc.Stage(), e.Offset)})
		return nil
	})
}

func stages(tp trace.TracerProvider, keyConc int) []chain.Stage {
	return []chain.Stage{
		{Name: "click", Filter: typeIs("click"), Processor: emitter(nil), KeyConcurrency: keyConc},
		{Name: "install", Filter: typeIs("install"), Processor: emitter(tp), KeyConcurrency: keyConc},
		{Name: "purchase", Filter: typeIs("purchase"), Processor: emitter(nil), KeyConcurrency: keyConc},
	}
}

const traceID = "0af7651916cd43dd8448eb211c80319c"

// traceparent is a W3C traceparent of traceID with span id n.
func traceparent(n int, sampled bool) string {
	flags := "00"
	if sampled {
		flags = "01"
	}
	return fmt.Sprintf("00-%s-%016x-%s", traceID, n, flags)
}

func rec(key, value, tp string) chain.Record {
	r := chaintest.Rec(key, value, base)
	if tp != "" {
		r.Headers = []chain.Header{{Key: []byte("traceparent"), Value: []byte(tp)}}
	}
	return r
}

// spanContext reads the trace context of a message's headers.
func spanContext(t *testing.T, h []chain.Header) trace.SpanContext {
	t.Helper()
	m := propagation.MapCarrier{}
	n := 0
	for _, x := range h {
		if string(x.Key) == "traceparent" {
			n++
		}
		m[string(x.Key)] = string(x.Value)
	}
	require.LessOrEqual(t, n, 1, "one traceparent header")
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), m))
}

func header(h []chain.Header, key string) string {
	for _, x := range h {
		if string(x.Key) == key {
			return string(x.Value)
		}
	}
	return ""
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// stageSpans indexes the ended stage spans by "stage@offset".
func stageSpans(t *testing.T, ended []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		if !strings.HasPrefix(s.Name(), "process ") {
			continue
		}
		a := attrs(s)
		id := fmt.Sprintf("%s@%d", a[chainotel.AttrStage].AsString(), a["messaging.kafka.offset"].AsInt64())
		require.NotContains(t, out, id, "one span per record and stage")
		out[id] = s
	}
	return out
}

// TestTraceCrossesChain: a record's traceparent is the parent of the span
// of the stage that processes it, and that span's context is in the
// headers of the record's outputs and dead letter — the same trace id, the
// stage span as parent — so a trace follows click, install and purchase
// through the chain to whatever reads its outputs. Stages that only skip a
// record make no span; the processor's own spans nest under the stage's.
func TestTraceCrossesChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		tt := chaintest.New(t, stages(tp, 1), decoder, chain.WithTracer(chainotel.New(tp, chainotel.WithConsumerGroup("g"))))
		tt.Start(0)
		tt.Feed(0,
			rec("u1", "click|1", traceparent(1, true)),
			rec("u1", "install|2", traceparent(2, true)),
			rec("u1", "purchase|3", traceparent(3, true)),
			rec("u2", "bad", traceparent(4, true)),
			rec("fail", "install|5", traceparent(5, true)),
			rec("u3", "click|6", ""),
		)
		require.NoError(t, tt.Stop())

		ended := sr.Ended()
		spans := stageSpans(t, ended)
		require.Len(t, spans, 6)
		for id, parent := range map[string]int{"click@0": 1, "install@1": 2, "purchase@2": 3, "click@3": 4, "install@4": 5} {
			s := spans[id]
			require.NotNil(t, s, id)
			require.Equal(t, traceID, s.SpanContext().TraceID().String(), id)
			require.True(t, s.Parent().IsRemote(), id)
			require.Equal(t, fmt.Sprintf("%016x", parent), s.Parent().SpanID().String(), "%s: child of the input's traceparent", id)
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			a := attrs(s)
			require.Equal(t, "kafka", a["messaging.system"].AsString())
			require.Equal(t, chaintest.Topic, a["messaging.destination.name"].AsString())
			require.Equal(t, "0", a["messaging.destination.partition.id"].AsString())
			require.Equal(t, "g", a["messaging.consumer.group.name"].AsString())
			require.Contains(t, a, chainotel.AttrGateWait)
		}
		require.False(t, spans["click@5"].Parent().IsValid(), "no traceparent: a new trace")

		// The outputs carry their stage span's context.
		outs := tt.Outputs("output")
		require.Len(t, outs, 4)
		for _, m := range outs {
			id := string(m.Value)
			s := spans[id]
			require.NotNil(t, s, id)
			sc := spanContext(t, m.Headers)
			require.Equal(t, s.SpanContext().TraceID(), sc.TraceID(), id)
			require.Equal(t, s.SpanContext().SpanID(), sc.SpanID(), "%s: the output's parent is the stage span", id)
			require.True(t, sc.IsSampled())
			a := attrs(s)
			require.Equal(t, "completed", a[chainotel.AttrOutcome].AsString())
			require.Equal(t, codes.Unset, s.Status().Code)
			var events []string
			for _, e := range s.Events() {
				events = append(events, e.Name)
			}
			require.Equal(t, []string{chainotel.EventBegun, chainotel.EventProcessed, chainotel.EventProduced}, events, id)
			require.False(t, s.EndTime().Before(s.StartTime()))
		}
		install := spans["install@1"]
		require.Equal(t, "process install", install.Name())
		require.Equal(t, "install", attrs(install)[chainotel.AttrEventType].AsString())

		// The dead letters too, in place of the input's traceparent.
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 2)
		for _, m := range dlq {
			id := map[string]string{"3": "click@3", "4": "install@4"}[header(m.Headers, chain.HeaderDLQOffset)]
			s := spans[id]
			require.NotNil(t, s, id)
			sc := spanContext(t, m.Headers)
			require.Equal(t, s.SpanContext().SpanID(), sc.SpanID(), id)
			require.Equal(t, traceID, sc.TraceID().String(), id)
			require.Equal(t, "dead_lettered", attrs(s)[chainotel.AttrOutcome].AsString())
			require.Equal(t, codes.Error, s.Status().Code, id)
			require.Contains(t, s.Status().Description, header(m.Headers, chain.HeaderDLQReason))
		}

		// The install processor's own spans are children of the stage's.
		var app []sdktrace.ReadOnlySpan
		for _, s := range ended {
			if s.Name() == "app work" {
				app = append(app, s)
			}
		}
		require.Len(t, app, 2)
		parents := map[trace.SpanID]bool{spans["install@1"].SpanContext().SpanID(): true, spans["install@4"].SpanContext().SpanID(): true}
		for _, s := range app {
			require.True(t, parents[s.Parent().SpanID()], "a processor span's parent is its stage span")
		}
	})
}

// TestUnsampledStillPropagates: with sampling off (parent-based, ratio 0),
// an unsampled input makes no span at all, yet the outputs carry the
// input's trace id with a new span id and the sampled flag off, so the
// services downstream stay in the trace and make the same decision; a
// record without a traceparent gets a new trace id; a sampled input is
// still traced (parent-based).
func TestUnsampledStillPropagates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
		tt := chaintest.New(t, stages(nil, 1), decoder, chain.WithTracer(chainotel.New(tp)))
		tt.Start(0)
		tt.Feed(0,
			rec("u1", "click|1", traceparent(1, false)),
			rec("u1", "install|2", ""),
			rec("u2", "bad", traceparent(3, false)),
		)
		require.Empty(t, sr.Started(), "nothing sampled, nothing recorded")
		outs := tt.Outputs("output")
		require.Len(t, outs, 2)
		for _, m := range outs {
			sc := spanContext(t, m.Headers)
			require.True(t, sc.IsValid(), "%s: context propagated", m.Value)
			require.False(t, sc.IsSampled(), string(m.Value))
			if string(m.Value) == "click@0" {
				require.Equal(t, traceID, sc.TraceID().String())
				require.NotEqual(t, fmt.Sprintf("%016x", 1), sc.SpanID().String(), "a span of its own, unrecorded")
			} else {
				require.NotEqual(t, traceID, sc.TraceID().String(), "a new trace")
			}
		}
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 1)
		sc := spanContext(t, dlq[0].Headers)
		require.Equal(t, traceID, sc.TraceID().String())
		require.False(t, sc.IsSampled())

		tt.Feed(0, rec("u1", "purchase|4", traceparent(4, true)))
		require.NoError(t, tt.Stop())
		require.Len(t, sr.Ended(), 1, "a sampled parent is followed")
		require.Equal(t, "process purchase", sr.Ended()[0].Name())
	})
}

// TestKeyParallelTracing runs key-parallel stages, under the partition and
// the key-scoped gate, with acknowledgements on other goroutines (for
// -race): every output still carries its own stage span, a child of its
// input's traceparent.
func TestKeyParallelTracing(t *testing.T) {
	for _, gate := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(gate), func(t *testing.T) { testKeyParallelTracing(t, gate) })
	}
}

func testKeyParallelTracing(t *testing.T, gate chain.GateScope) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	st := stages(nil, 4)
	for i := 1; i < len(st); i++ {
		st[i].Gate = gate
	}
	tt := chaintest.New(t, st, decoder, chain.WithTracer(chainotel.New(tp)), chain.WithIdleTimeout(time.Millisecond))
	tt.SetAckMode(chaintest.AckAsync)
	tt.Start(0)
	types := []string{"click", "install", "purchase"}
	var recs []chain.Record
	for i := range 300 {
		recs = append(recs, rec(fmt.Sprintf("u%d", i%7), fmt.Sprintf("%s|%d", types[i%3], i), traceparent(i+1, true)))
	}
	tt.Feed(0, recs...)
	require.NoError(t, tt.Stop())
	spans := stageSpans(t, sr.Ended())
	require.Len(t, spans, 300)
	outs := tt.Outputs("output")
	require.Len(t, outs, 300)
	for _, m := range outs {
		s := spans[string(m.Value)]
		require.NotNil(t, s, string(m.Value))
		require.Equal(t, s.SpanContext().SpanID(), spanContext(t, m.Headers).SpanID())
		o := attrs(s)["messaging.kafka.offset"].AsInt64()
		require.Equal(t, fmt.Sprintf("%016x", o+1), s.Parent().SpanID().String())
	}
}

// TestInjectReplacesAndCopies: Inject replaces a traceparent in any case
// and writes a new slice, never into the caller's (a processor may share one
// header slice between messages).
func TestInjectReplacesAndCopies(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	tr := chainotel.New(tp)
	in := rec("u", "click|1", traceparent(9, true))
	ev := chain.Event{Record: in}
	sp := tr.Start("click", &ev)
	shared := make([]chain.Header, 2, 8)
	shared[0] = chain.Header{Key: []byte("TraceParent"), Value: []byte("00-" + strings.Repeat("1", 32) + "-" + strings.Repeat("2", 16) + "-01")}
	shared[1] = chain.Header{Key: []byte("app"), Value: []byte("v")}
	before := fmt.Sprint(shared[:cap(shared)])
	got := sp.Inject(shared)
	sp.End(chain.OutcomeCompleted, nil)
	require.Equal(t, before, fmt.Sprint(shared[:cap(shared)]), "the caller's slice is untouched")
	require.Len(t, got, 2)
	require.Equal(t, "app", string(got[0].Key))
	require.Equal(t, "traceparent", string(got[1].Key))
	sc := spanContext(t, got)
	require.Equal(t, traceID, sc.TraceID().String())
}
