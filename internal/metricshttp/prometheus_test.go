package metricshttp

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"
)

func TestSeriesOf(t *testing.T) {
	for _, tc := range []struct {
		name, base string
		labels     []label
		monotone   bool
	}{
		{"differential.stage.events.3.click.position", "differential_stage_position",
			[]label{{"topic", "events"}, {"partition", "3"}, {"stage", "click"}}, false},
		{"differential.stage.my.dotted.topic.12.install.processed", "differential_stage_processed",
			[]label{{"topic", "my.dotted.topic"}, {"partition", "12"}, {"stage", "install"}}, true},
		{"differential.partition.events.0.commits", "differential_partition_commits",
			[]label{{"topic", "events"}, {"partition", "0"}}, true},
		{"differential.partition.a-b.7.high_watermark", "differential_partition_high_watermark",
			[]label{{"topic", "a-b"}, {"partition", "7"}}, false},
		// Not the engine's layout: exported under a sanitized name.
		{"differential.stage.events.x.click.position", "sarama_differential_stage_events_x_click_position", nil, false},
		{"request-latency-in-ms-for-broker-1", "sarama_request_latency_in_ms", []label{{"broker", "1"}}, false},
		{"record-send-rate-for-topic-events.out", "sarama_record_send_rate", []label{{"topic", "events.out"}}, false},
		{"consumer-group-sync-total-my-group", "sarama_consumer_group_sync_total", []label{{"group", "my-group"}}, false},
		{"incoming-byte-rate", "sarama_incoming_byte_rate", nil, false},
	} {
		got := seriesOf(tc.name)
		require.Equal(t, series{tc.base, tc.labels, tc.monotone}, got, tc.name)
	}
}

func TestFormatValue(t *testing.T) {
	require.Equal(t, "1795985886089", formatValue(1795985886089))
	require.Equal(t, "-1", formatValue(-1))
	require.Equal(t, "0.25", formatValue(0.25))
	require.Equal(t, "1e+20", formatValue(1e20))
	require.Equal(t, "NaN", formatValue(math.NaN()))
	require.Equal(t, "+Inf", formatValue(math.Inf(1)))
}

func TestSanitizeAndEscape(t *testing.T) {
	require.Equal(t, "_a_b:c_9", sanitize("9a-b:c.9"))
	require.Equal(t, `a\\b\"c\nd`, escapeLabel("a\\b\"c\nd"))
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
	require.NoError(t, Write(&buf, reg))
	out := buf.String()
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(out))
	require.NoError(t, err, out)

	require.Contains(t, out, `differential_stage_position{topic="events",partition="0",stage="click"} 41`+"\n")
	require.Contains(t, out, `differential_stage_position{topic="events",partition="1",stage="click"} 7`+"\n")
	require.Contains(t, out, "# TYPE differential_stage_processed_total counter\n")
	require.Contains(t, out, `differential_partition_commits_total{topic="events",partition="0"} 3`+"\n")
	require.Contains(t, out, `sarama_requests_in_flight{broker="1"} 2`+"\n")
	require.Contains(t, out, "sarama_incoming_byte_rate_total 5\n")
	require.Contains(t, out, `sarama_incoming_byte_rate_total{broker="1"} 0`+"\n")
	require.Contains(t, out, "sarama_request_latency_in_ms_count 2\n")
	require.Contains(t, out, "sarama_request_latency_in_ms_sum 40\n")
	require.Contains(t, out, "differential_demo_step_seconds_sum 2\n")
	require.Equal(t, 1, strings.Count(out, "\nsarama_compression_ratio "), out)
	require.Len(t, fams["differential_stage_position"].Metric, 2)
	require.Equal(t, "SUMMARY", fams["sarama_request_latency_in_ms"].GetType().String())

	// Functional gauges are read at every scrape.
	pos = 42
	buf.Reset()
	require.NoError(t, Write(&buf, reg))
	require.Contains(t, buf.String(), `differential_stage_position{topic="events",partition="0",stage="click"} 42`+"\n")
}

func TestHandlerServesTextFormat(t *testing.T) {
	reg := metrics.NewRegistry()
	require.NoError(t, reg.Register("differential.partition.events.0.committed", metrics.NewFunctionalGauge(func() int64 { return 9 })))
	rec := httptest.NewRecorder()
	Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, ContentType, rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Body.String(), `differential_partition_committed{topic="events",partition="0"} 9`)
}
