package metricshttp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"
)

func TestSeriesOf(t *testing.T) {
	topics := topicNames([]string{"events.out", "differential-attribution.events.state"})
	for _, tc := range []struct {
		name, base string
		labels     []label
		monotone   bool
		scale      float64
	}{
		{"differential.stage.events.3.click.position", "differential_stage_position",
			[]label{{"topic", "events"}, {"partition", "3"}, {"stage", "click"}}, false, 1},
		{"differential.stage.my.dotted.topic.12.install.processed", "differential_stage_processed",
			[]label{{"topic", "my.dotted.topic"}, {"partition", "12"}, {"stage", "install"}}, true, 1},
		{"differential.stage.events.3.click.watermark_unix_ms", "differential_stage_watermark_timestamp_seconds",
			[]label{{"topic", "events"}, {"partition", "3"}, {"stage", "click"}}, false, 1e-3},
		{"differential.stage.events.3.install.gap_ms", "differential_stage_gap_seconds",
			[]label{{"topic", "events"}, {"partition", "3"}, {"stage", "install"}}, false, 1e-3},
		{"differential.partition.events.0.commits", "differential_partition_commits",
			[]label{{"topic", "events"}, {"partition", "0"}}, true, 1},
		{"differential.partition.a-b.7.high_watermark", "differential_partition_high_watermark",
			[]label{{"topic", "a-b"}, {"partition", "7"}}, false, 1},
		{"differential.txn.aborted.send", "differential_txn_aborted", []label{{"cause", "send"}}, true, 1},
		{"differential.txn.committed", "differential_txn_committed", nil, true, 1},
		{"differential.txn.fenced", "differential_txn_fenced", nil, true, 1},
		{"differential.txn.cycle_ms", "differential_txn_cycle_seconds", nil, false, 1e-3},
		{"differential.window.velocity.counted", "differential_window_counted", []label{{"window", "velocity"}}, true, 1},
		{"differential.window.velocity.state_bytes", "differential_window_state_bytes", []label{{"window", "velocity"}}, false, 1},
		{"differential.velocity.alerts", "differential_velocity_alerts", nil, true, 1},
		{"differential.standby.warm", "differential_standby_warm", nil, false, 1},
		{"differential.standby.records", "differential_standby_records", nil, true, 1},
		{"differential.standby.errors", "differential_standby_errors", nil, true, 1},
		// Not the engine's layout: exported under a sanitized name.
		{"differential.stage.events.x.click.position", "differential_stage_events_x_click_position", nil, false, 1},
		{"request-latency-in-ms-for-broker-1", "sarama_request_latency_seconds", []label{{"broker", "1"}}, false, 1e-3},
		{"record-send-rate-for-topic-events_out", "sarama_records_sent", []label{{"topic", "events.out"}}, false, 1},
		// sarama writes '.' as '_' in a topic: the label has the real name.
		{"batch-size-for-topic-differential-attribution_events_state", "sarama_batch_size_bytes",
			[]label{{"topic", "differential-attribution.events.state"}}, false, 1},
		// A topic the process was not told about keeps sarama's spelling.
		{"batch-size-for-topic-other_topic", "sarama_batch_size_bytes", []label{{"topic", "other_topic"}}, false, 1},
		{"compression-ratio", "sarama_compression_ratio", nil, false, 0.01},
		{"consumer-group-sync-total-my-group", "sarama_consumer_group_sync", []label{{"group", "my-group"}}, true, 1},
		{"protocol-requests-rate-3-for-broker-1", "sarama_protocol_requests", []label{{"broker", "1"}, {"api_key", "3"}}, false, 1},
		{"incoming-byte-rate", "sarama_incoming_bytes", nil, false, 1},
	} {
		got := seriesOf(tc.name, topics)
		require.Equal(t, tc.base, got.base, tc.name)
		require.Equal(t, tc.labels, got.labels, tc.name)
		require.Equal(t, tc.monotone, got.monotone, tc.name)
		require.InDelta(t, tc.scale, got.scale, 1e-12, tc.name)
		if !strings.HasPrefix(tc.name, "differential.stage.events.x") {
			require.NotEmpty(t, got.help, "%s has a HELP text", tc.name)
		}
	}
}

func TestSanitize(t *testing.T) {
	require.Equal(t, "_a_b:c_9", sanitize("9a-b:c.9"))
}

// TestWriteIsValidExposition exports every go-metrics kind and parses the
// result with Prometheus' own text parser.
func TestWriteIsValidExposition(t *testing.T) {
	reg := metrics.NewRegistry()
	pos := int64(41)
	require.NoError(t, reg.Register("differential.stage.events.0.click.position", metrics.NewFunctionalGauge(func() int64 { return pos })))
	require.NoError(t, reg.Register("differential.stage.events.1.click.position", metrics.NewFunctionalGauge(func() int64 { return 7 })))
	require.NoError(t, reg.Register("differential.stage.events.0.click.processed", metrics.NewFunctionalGauge(func() int64 { return 40 })))
	require.NoError(t, reg.Register("differential.partition.events.0.commits", metrics.NewFunctionalGauge(func() int64 { return 3 })))
	c := metrics.NewCounter()
	c.Inc(2)
	require.NoError(t, reg.Register("requests-in-flight-for-broker-1", c))
	aborted := metrics.NewCounter()
	aborted.Inc(3)
	require.NoError(t, reg.Register("differential.txn.aborted.commit", aborted))
	m := metrics.NewMeter()
	m.Mark(5)
	require.NoError(t, reg.Register("incoming-byte-rate", m))
	require.NoError(t, reg.Register("incoming-byte-rate-for-broker-1", metrics.NewMeter()))
	h := metrics.NewHistogram(metrics.NewUniformSample(100))
	h.Update(10)
	h.Update(30)
	require.NoError(t, reg.Register("request-latency-in-ms", h))
	tm := metrics.NewTimer()
	tm.Update(2 * time.Second)
	require.NoError(t, reg.Register("differential.demo.step", tm))
	g := metrics.NewGaugeFloat64()
	g.Update(0.5)
	require.NoError(t, reg.Register("compression ratio", g))
	// Collides with "compression ratio" after sanitizing: dropped, not duplicated.
	require.NoError(t, reg.Register("compression-ratio", metrics.NewGaugeFloat64()))

	var buf bytes.Buffer
	require.NoError(t, Write(&buf, reg, Options{}))
	out := buf.String()
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(out))
	require.NoError(t, err, out)

	pos0 := map[string]string{"topic": "events", "partition": "0", "stage": "click"}
	require.Equal(t, 41.0, sampleValue(t, fams, "differential_stage_position", pos0))
	require.Equal(t, 7.0, sampleValue(t, fams, "differential_stage_position", map[string]string{"topic": "events", "partition": "1", "stage": "click"}))
	require.Equal(t, "COUNTER", fams["differential_stage_processed_total"].GetType().String())
	require.Equal(t, 40.0, sampleValue(t, fams, "differential_stage_processed_total", pos0))
	require.Equal(t, 3.0, sampleValue(t, fams, "differential_partition_commits_total", map[string]string{"topic": "events", "partition": "0"}))
	require.Equal(t, "GAUGE", fams["sarama_requests_in_flight"].GetType().String())
	require.Equal(t, 2.0, sampleValue(t, fams, "sarama_requests_in_flight", map[string]string{"broker": "1"}))
	require.Equal(t, "COUNTER", fams["differential_txn_aborted_total"].GetType().String())
	require.Equal(t, 3.0, sampleValue(t, fams, "differential_txn_aborted_total", map[string]string{"cause": "commit"}))
	require.Equal(t, 5.0, sampleValue(t, fams, "sarama_incoming_bytes_total", nil))
	require.Equal(t, 0.0, sampleValue(t, fams, "sarama_incoming_bytes_total", map[string]string{"broker": "1"}))
	require.Contains(t, fams, "sarama_incoming_bytes_rate1")
	lat := fams["sarama_request_latency_seconds"]
	require.Equal(t, "SUMMARY", lat.GetType().String())
	require.Equal(t, uint64(2), lat.Metric[0].GetSummary().GetSampleCount())
	require.InDelta(t, 0.040, lat.Metric[0].GetSummary().GetSampleSum(), 1e-12, "milliseconds exported as seconds")
	require.Len(t, lat.Metric[0].GetSummary().GetQuantile(), 4)
	require.Equal(t, 2.0, fams["differential_demo_step_seconds"].Metric[0].GetSummary().GetSampleSum(), "timers in seconds")
	require.Len(t, fams["sarama_compression_ratio"].Metric, 1, "the colliding name is dropped")
	require.Equal(t, 0.5, sampleValue(t, fams, "sarama_compression_ratio", nil), "the first name in order wins")
	require.Len(t, fams["differential_stage_position"].Metric, 2)

	// Functional gauges are read at every scrape.
	pos = 42
	buf.Reset()
	require.NoError(t, Write(&buf, reg, Options{}))
	fams, err = new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(buf.String()))
	require.NoError(t, err)
	require.Equal(t, 42.0, sampleValue(t, fams, "differential_stage_position", pos0))
}

// sampleValue returns the value of the counter or gauge series of family
// name whose labels are exactly labels.
func sampleValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "family %s", name)
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// TestHandlerServesRegistryGoAndProcess: /metrics, through promhttp, serves
// the go-metrics registry beside the Go runtime's (go_*) and the process's
// (process_*) series, in the text format a Prometheus scrape asks for.
func TestHandlerServesRegistryGoAndProcess(t *testing.T) {
	reg := metrics.NewRegistry()
	require.NoError(t, reg.Register("differential.partition.events.0.committed", metrics.NewFunctionalGauge(func() int64 { return 9 })))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1") // what Prometheus sends without OpenMetrics
	Handler(reg, Options{}).ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, ContentType, rec.Header().Get("Content-Type"))
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	require.Equal(t, 9.0, sampleValue(t, fams, "differential_partition_committed", map[string]string{"topic": "events", "partition": "0"}))
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds", "go_info",
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"} {
		require.Contains(t, fams, name)
	}
}
