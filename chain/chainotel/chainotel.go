package chainotel

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/differential-dev/differential/chain"
)

// ScopeName is the instrumentation scope of the spans (the tracer's name).
const ScopeName = "github.com/differential-dev/differential/chain"

// The attributes and events this package adds besides the OpenTelemetry
// messaging conventions (see the package documentation).
const (
	AttrStage          = attribute.Key("differential.stage")
	AttrEventType      = attribute.Key("differential.event.type")
	AttrEventTime      = attribute.Key("differential.event.time")
	AttrGateWait       = attribute.Key("differential.gate.wait_seconds")
	AttrLeaderNext     = attribute.Key("differential.gate.leader_next")
	AttrLeaderWM       = attribute.Key("differential.gate.leader_watermark")
	AttrLeaderIdle     = attribute.Key("differential.gate.leader_idle")
	AttrAttempts       = attribute.Key("differential.attempts")
	AttrOutputs        = attribute.Key("differential.outputs")
	AttrOutcome        = attribute.Key("differential.outcome")
	EventBegun         = "begun"
	EventProcessed     = "processed"
	EventProduced      = "produced"
	EventProduceFailed = "produce failed"
)

// Tracer is a chain.Tracer over an OpenTelemetry TracerProvider. Safe for
// concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	fields [][]byte // the header keys prop writes (replaced by Inject)
	static []attribute.KeyValue
	key    bool
	// startOpts are the options of every span (built once: an option is an
	// allocation).
	startOpts []trace.SpanStartOption

	// names maps a stage to its span name; copied on write (stages are
	// few), so a lookup takes no lock and allocates nothing.
	names   atomic.Pointer[map[string]string]
	namesMu sync.Mutex
}

// New returns a Tracer whose spans tp creates (its sampler decides which are
// recorded and exported).
func New(tp trace.TracerProvider, opts ...Option) *Tracer {
	t := &Tracer{
		tracer: tp.Tracer(ScopeName),
		prop:   propagation.TraceContext{},
		static: []attribute.KeyValue{semconv.MessagingSystemKafka, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process")},
	}
	for _, o := range opts {
		o.apply(t)
	}
	for _, f := range t.prop.Fields() {
		t.fields = append(t.fields, []byte(f))
	}
	t.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	m := map[string]string{}
	t.names.Store(&m)
	return t
}

// SpanName is the name of a stage's spans: "process <stage>".
func SpanName(stage string) string { return "process " + stage }

func (t *Tracer) spanName(stage string) string {
	if n, ok := (*t.names.Load())[stage]; ok {
		return n
	}
	t.namesMu.Lock()
	defer t.namesMu.Unlock()
	old := *t.names.Load()
	if n, ok := old[stage]; ok {
		return n
	}
	m := make(map[string]string, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	n := SpanName(stage)
	m[stage] = n
	t.names.Store(&m)
	return n
}

// Start starts the span of ev in stage, a child of the trace context in
// ev's headers (a new trace when they carry none, or an invalid one).
func (t *Tracer) Start(stage string, ev *chain.Event) chain.RecordSpan {
	ctx := t.prop.Extract(context.Background(), carrier{h: &ev.Headers})
	ctx, span := t.tracer.Start(ctx, t.spanName(stage), t.startOpts...)
	s := &recordSpan{t: t, ctx: ctx, span: span}
	if span.IsRecording() {
		s.start = time.Now()
		attrs := make([]attribute.KeyValue, 0, len(t.static)+9)
		attrs = append(attrs, t.static...)
		attrs = append(attrs,
			semconv.MessagingDestinationName(ev.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(int(ev.Partition))),
			semconv.MessagingKafkaOffset(int(ev.Offset)),
			semconv.MessagingMessageBodySize(len(ev.Value)),
			AttrStage.String(stage),
		)
		if ev.Type != "" {
			attrs = append(attrs, AttrEventType.String(ev.Type))
		}
		if !ev.Time.IsZero() {
			attrs = append(attrs, AttrEventTime.String(ev.Time.UTC().Format(time.RFC3339Nano)))
		}
		if t.key {
			attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(ev.Key)))
		}
		span.SetAttributes(attrs...)
	}
	return s
}

// recordSpan is one record's span in one stage (chain.RecordSpan).
type recordSpan struct {
	t     *Tracer
	ctx   context.Context // carries span
	span  trace.Span
	start time.Time // when recording
}

func (s *recordSpan) Begun(b chain.BeginInfo) {
	if !s.span.IsRecording() {
		return
	}
	wait := time.Since(s.start).Seconds()
	s.span.SetAttributes(AttrGateWait.Float64(wait))
	if b.LeaderNext < 0 {
		s.span.AddEvent(EventBegun) // the first stage: no leader, no gate
		return
	}
	attrs := []attribute.KeyValue{AttrLeaderNext.Int64(b.LeaderNext), AttrLeaderIdle.Bool(b.Idle)}
	if !b.LeaderWatermark.IsZero() {
		attrs = append(attrs, AttrLeaderWM.String(b.LeaderWatermark.UTC().Format(time.RFC3339Nano)))
	}
	s.span.AddEvent(EventBegun, trace.WithAttributes(attrs...))
}

func (s *recordSpan) Context(ctx context.Context) context.Context {
	return trace.ContextWithSpan(ctx, s.span)
}

func (s *recordSpan) Processed(attempts, outputs int, err error) {
	if !s.span.IsRecording() {
		return
	}
	s.span.AddEvent(EventProcessed, trace.WithAttributes(AttrAttempts.Int(attempts), AttrOutputs.Int(outputs)))
	if err != nil {
		s.span.RecordError(err)
	}
}

// Inject returns h without the propagator's headers, then the span's
// context in them.
func (s *recordSpan) Inject(h []chain.Header) []chain.Header {
	out := make([]chain.Header, 0, len(h)+len(s.t.fields))
	for _, x := range h {
		if !s.t.isField(x.Key) {
			out = append(out, x)
		}
	}
	s.t.prop.Inject(s.ctx, carrier{h: &out})
	return out
}

func (t *Tracer) isField(key []byte) bool {
	for _, f := range t.fields {
		if bytes.EqualFold(key, f) {
			return true
		}
	}
	return false
}

func (s *recordSpan) Produced(err error) {
	if !s.span.IsRecording() {
		return
	}
	if err != nil {
		s.span.AddEvent(EventProduceFailed)
		s.span.RecordError(err)
		return
	}
	s.span.AddEvent(EventProduced)
}

func (s *recordSpan) End(o chain.Outcome, err error) {
	if s.span.IsRecording() {
		s.span.SetAttributes(AttrOutcome.String(o.String()))
		switch {
		case o == chain.OutcomeDeadLettered && err != nil:
			s.span.SetStatus(codes.Error, "dead-lettered: "+err.Error())
		case o == chain.OutcomeDropped && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.span.End()
}

// carrier is a propagation.TextMapCarrier over record headers. Get matches
// keys without regard to case (HTTP headers are case-insensitive, and a
// bridge from HTTP may keep their case); Set replaces a key's value or
// appends it.
type carrier struct{ h *[]chain.Header }

func (c carrier) Get(key string) string {
	for _, x := range *c.h {
		if len(x.Key) == len(key) && bytes.EqualFold(x.Key, []byte(key)) {
			return string(x.Value)
		}
	}
	return ""
}

func (c carrier) Set(key, value string) {
	for i, x := range *c.h {
		if bytes.EqualFold(x.Key, []byte(key)) {
			(*c.h)[i].Value = []byte(value)
			return
		}
	}
	*c.h = append(*c.h, chain.Header{Key: []byte(key), Value: []byte(value)})
}

func (c carrier) Keys() []string {
	keys := make([]string, len(*c.h))
	for i, x := range *c.h {
		keys[i] = string(x.Key)
	}
	return keys
}
