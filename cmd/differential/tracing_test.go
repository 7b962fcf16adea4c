package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/otelx"
	"github.com/differential-dev/differential/internal/otlptest"
	"github.com/differential-dev/differential/internal/testutil"
)

const journeyTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// upstream is the traceparent an upstream service put on its record n.
func upstream(n int) string { return fmt.Sprintf("00-%s-%016x-01", journeyTrace, n) }

// produceJourney writes one user's click, install and purchase, each with a
// traceparent of one trace (as the services that emitted them would), and
// an invalid record of that trace: partition 0, offsets 0 to 3.
func produceJourney(t *testing.T, tp *topics) {
	t.Helper()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	msg := func(n int, key, value string) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{
			Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value), Partition: 0, Timestamp: at,
			Headers: []sarama.RecordHeader{{Key: []byte("traceparent"), Value: []byte(upstream(n))}},
		}
	}
	ts := func(d time.Duration) string { return at.Add(d).Format(time.RFC3339) }
	tp.b.Produce(t, tp.in,
		msg(1, "u1", `{"event_id":"c1","type":"click","user_id":"u1","time":"`+ts(-2*time.Minute)+`","campaign_id":"cmp-1"}`),
		msg(2, "u1", `{"event_id":"i1","type":"install","user_id":"u1","time":"`+ts(-time.Minute)+`"}`),
		msg(3, "u1", `{"event_id":"p1","type":"purchase","user_id":"u1","time":"`+ts(0)+`","revenue":4.99,"currency":"USD"}`),
		msg(4, "u2", `not json`),
	)
}

func traceparentOf(h []*sarama.RecordHeader) (string, int) {
	v, n := "", 0
	for _, x := range h {
		if string(x.Key) == "traceparent" {
			v, n = string(x.Value), n+1
		}
	}
	return v, n
}

// TestRunExportsTraces: `run --otlp-endpoint` exports, over OTLP/HTTP to
// the endpoint the test serves, a span per record for the stage that acts
// on it, each a child of the record's traceparent; the attributed install
// and purchase and the dead letter carry the span's context in their
// traceparent, so the upstream trace goes on through the chain.
func TestRunExportsTraces(t *testing.T) {
	for _, g := range []string{"at-least-once", "exactly-once"} {
		t.Run(g, func(t *testing.T) { testRunExportsTraces(t, "--guarantee", g) })
	}
}

func testRunExportsTraces(t *testing.T, extra ...string) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	rcv, endpoint := otlptest.NewHTTP(t)
	tp := newTopics(t, 1)
	produceJourney(t, tp)
	p := tp.runToEnd(t, append([]string{"--otlp-endpoint", endpoint, "--trace-sample-ratio", "0"}, extra...)...)
	require.Contains(t, p.err.String(), `"msg":"tracing on"`)

	// Flushed before run exited.
	byOffset := map[string]otlptest.Span{}
	for _, s := range rcv.Spans() {
		require.Equal(t, otelx.DefaultServiceName, s.Service)
		require.Equal(t, journeyTrace, s.TraceID, "%s: in the upstream trace", s.Name)
		require.Equal(t, tp.group, s.Attrs["messaging.consumer.group.name"])
		byOffset[s.Attrs["messaging.kafka.offset"]] = s
	}
	for off, want := range map[string]struct {
		name    string
		parent  int
		outcome string
	}{
		"0": {"process click", 1, "completed"},
		"1": {"process install", 2, "completed"},
		"2": {"process purchase", 3, "completed"},
		"3": {"process click", 4, "dead_lettered"},
	} {
		s, ok := byOffset[off]
		require.True(t, ok, "a span for offset %s; got %v", off, rcv.Spans())
		require.Equal(t, want.name, s.Name, off)
		require.Equal(t, fmt.Sprintf("%016x", want.parent), s.ParentSpanID, "offset %s: child of its traceparent", off)
		require.Equal(t, want.outcome, s.Attrs["differential.outcome"], off)
		require.Equal(t, tp.in, s.Attrs["messaging.destination.name"])
	}
	require.Len(t, rcv.Spans(), 4, "one span per record: the stages that skip a record make none")

	kinds := map[string]string{} // output type → the span its traceparent names
	for _, msgs := range tp.b.ReadAll(t, tp.out, false) {
		for _, m := range msgs {
			v, n := traceparentOf(m.Headers)
			require.Equal(t, 1, n, string(m.Value))
			parts := strings.Split(v, "-")
			require.Len(t, parts, 4, v)
			require.Equal(t, journeyTrace, parts[1])
			for _, s := range byOffset {
				if s.SpanID == parts[2] {
					kinds[s.Name] = string(m.Value)
				}
			}
		}
	}
	require.Contains(t, kinds, "process install", "the attributed install's parent is the install stage's span")
	require.Contains(t, kinds, "process purchase", "the attributed purchase's parent is the purchase stage's span")
	dlq := tp.b.ReadAll(t, tp.dlq, false)[0]
	require.Len(t, dlq, 1)
	v, n := traceparentOf(dlq[0].Headers)
	require.Equal(t, 1, n)
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", journeyTrace, byOffset["3"].SpanID), v, "the dead letter's parent is its span")
}

// TestRunWithoutTracingAddsNoHeaders: tracing is off by default; outputs
// then carry no traceparent and the dead letter keeps the input's.
func TestRunWithoutTracingAddsNoHeaders(t *testing.T) {
	tp := newTopics(t, 1)
	produceJourney(t, tp)
	p := tp.runToEnd(t)
	require.NotContains(t, p.err.String(), "tracing on")
	outs := 0
	for _, msgs := range tp.b.ReadAll(t, tp.out, false) {
		for _, m := range msgs {
			_, n := traceparentOf(m.Headers)
			require.Zero(t, n, string(m.Value))
			outs++
		}
	}
	require.Equal(t, 2, outs, "the install and the purchase")
	dlq := tp.b.ReadAll(t, tp.dlq, false)[0]
	require.Len(t, dlq, 1)
	v, n := traceparentOf(dlq[0].Headers)
	require.Equal(t, 1, n)
	require.Equal(t, upstream(4), v)
}

// TestTracingSettings: the tracing flags follow flag > environment > file >
// the standard OTEL_* variables > default, and bad values exit 2 naming
// the flag or variable to fix.
func TestTracingSettings(t *testing.T) {
	parse := func(vars map[string]string, args ...string) (runOptions, error) {
		e := &env{lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
		return parseRunOptions(args, e)
	}
	o, err := parse(nil, "--brokers", "a:1")
	require.NoError(t, err)
	require.Empty(t, o.tracing.endpoint, "off by default")
	require.False(t, o.tracing.on())
	require.Equal(t, 1.0, o.tracing.ratio)
	require.True(t, o.tracing.parentBased)

	path := writeConfig(t, "brokers: a:1\notlp-endpoint: http://file:4318\ntrace-sample-ratio: 0.25\n")
	o, err = parse(map[string]string{"DIFFERENTIAL_OTLP_ENDPOINT": "http://env:4318", "DIFFERENTIAL_TRACE_PARENT_BASED": "false",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318", "OTEL_TRACES_SAMPLER": "parentbased_always_off"},
		"--config", path, "--trace-sample-ratio", "0.5")
	require.NoError(t, err)
	require.Equal(t, "http://env:4318", o.tracing.endpoint, "env over file and OTEL_*")
	require.Equal(t, 0.5, o.tracing.ratio, "flag over file and OTEL_*")
	require.False(t, o.tracing.parentBased, "env over OTEL_* and default")
	require.True(t, o.tracing.on())

	// The standard variables alone turn tracing on and pick the sampler.
	o, err = parse(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
		"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}, "--brokers", "a:1")
	require.NoError(t, err)
	require.Equal(t, "http://traces:4318/v1/traces", o.tracing.endpoint)
	require.Equal(t, 0.1, o.tracing.ratio)
	require.False(t, o.tracing.parentBased)
	require.True(t, o.tracing.on())

	// OTEL_SDK_DISABLED turns it off whatever the endpoint; the other
	// OTEL_* values are then not checked.
	o, err = parse(map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_SAMPLER": "xray"}, "--brokers", "a:1", "--otlp-endpoint", "http://h:4318")
	require.NoError(t, err)
	require.False(t, o.tracing.on())
	// Bad OTEL_* values do not matter while tracing is off.
	_, err = parse(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "--brokers", "a:1")
	require.NoError(t, err)

	b := "--brokers=localhost:9092"
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"--trace-sample-ratio", "0.5"}, "--trace-sample-ratio needs --otlp-endpoint"},
		{nil, []string{"--trace-parent-based=false"}, "--trace-parent-based needs --otlp-endpoint"},
		{nil, []string{"--otlp-endpoint", "localhost:4318"}, `--otlp-endpoint: OTLP endpoint "localhost:4318" must be a URL http://host:port`},
		{nil, []string{"--otlp-endpoint", "http://h:4318", "--trace-sample-ratio", "1.5"}, "--trace-sample-ratio: sample ratio must be in [0, 1], got 1.5"},
		{map[string]string{"DIFFERENTIAL_TRACE_SAMPLE_RATIO": "most"}, []string{"--otlp-endpoint", "http://h:4318"}, `environment variable DIFFERENTIAL_TRACE_SAMPLE_RATIO (--trace-sample-ratio): invalid value "most"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, nil, `OTEL_EXPORTER_OTLP_ENDPOINT: OTLP endpoint "collector:4318" must be a URL`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, []string{"--otlp-endpoint", "http://h:4318"}, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": differential exports OTLP over HTTP only`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "5"}, nil, `OTEL_TRACES_SAMPLER_ARG="5"`},
	} {
		var out, errb testutil.SyncBuffer
		code := cli(context.Background(), append([]string{"run", b}, tc.args...), &env{stdout: &out, stderr: &errb,
			lookupEnv: func(k string) (string, bool) { v, ok := tc.vars[k]; return v, ok }})
		errs := errb.String()
		require.Equal(t, exitUsage, code, errs)
		require.Contains(t, errs, tc.want)
	}
}
