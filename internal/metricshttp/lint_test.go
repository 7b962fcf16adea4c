package metricshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// TestLintFindsEachRule: every rule Lint checks reports a breach of it.
func TestLintFindsEachRule(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"# HELP a_total x\n# TYPE a_total counter\na_total 1\n", ""},
		{"# HELP a x\n# TYPE a counter\na 1\n", `counter names should end in "_total"`},
		{"# HELP a_total x\n# TYPE a_total gauge\na_total 1\n", `only counter names should end in "_total"`},
		{"# TYPE a gauge\na 1\n", "no HELP line"},
		{"# HELP a \n# TYPE a gauge\na 1\n", "empty HELP text"},
		{"# HELP a x\na 1\n", "no TYPE line"},
		{"# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\n# HELP a x\n", "family appears more than once"},
		{"# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n", "more than one HELP line"},
		{"# HELP a_ms x\n# TYPE a_ms gauge\na_ms 1\n", `spell the unit out`},
		{"# HELP a_milliseconds x\n# TYPE a_milliseconds gauge\na_milliseconds 1\n", `use the base unit "seconds" instead of "milliseconds"`},
		{"# HELP a_percent x\n# TYPE a_percent gauge\na_percent 1\n", `use the base unit "ratio"`},
		{"# HELP 9a x\n# TYPE 9a gauge\n", "invalid metric name"},
		{"# HELP a:b x\n# TYPE a:b gauge\na:b 1\n", "should not contain ':'"},
		{"# HELP fooBar x\n# TYPE fooBar gauge\nfooBar 1\n", "camelCase"},
		{"# HELP a_count x\n# TYPE a_count gauge\na_count 1\n", `"_count" and "_sum" are reserved`},
		{"# HELP a_gauge x\n# TYPE a_gauge gauge\na_gauge 1\n", `should not contain their type "gauge"`},
		{"# HELP a x\n# TYPE a gauge\nb 1\n", "sample outside its family"},
		{"# HELP a x\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n", "duplicate sample"},
		{"# HELP a x\n# TYPE a gauge\na{quantile=\"1\"} 1\n", `"quantile" label is reserved`},
		{"# HELP a x\n# TYPE a gauge\na{fooBar=\"1\"} 1\n", "label names should be snake_case"},
		{"# HELP a x\n# TYPE a gauge\na one\n", "a sample is a name"},
		{"# HELP a x\n# TYPE a summary\na{quantile=\"0.5\"} 1\na_sum 2\na_count 3\n", ""},
	} {
		problems, err := Lint(strings.NewReader(tc.text))
		require.NoError(t, err)
		if tc.want == "" {
			require.Empty(t, problems, tc.text)
			continue
		}
		var texts []string
		for _, p := range problems {
			texts = append(texts, p.String())
		}
		require.Contains(t, strings.Join(texts, "\n"), tc.want, tc.text)
	}
}

// engineRegistry is a registry with every series the engine, the window
// counter and sarama register (their names as chainmetrics, kafka,
// processors/window and sarama's own documentation give them), for a
// changelog topic whose name has dots.
func engineRegistry(t *testing.T) metrics.Registry {
	t.Helper()
	reg := metrics.NewRegistry()
	g := func(name string, v int64) {
		require.NoError(t, reg.Register(name, metrics.NewFunctionalGauge(func() int64 { return v })))
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	p := "differential.partition.events.0."
	for _, m := range []string{"committed", "commits", "commit_errors", "high_watermark", "buffer_fill",
		"restore_records", "restore_bytes", "restoring"} {
		g(p+m, 1)
	}
	require.NoError(t, reg.Register(p+"restore_duration_seconds", metrics.NewFunctionalGaugeFloat64(func() float64 { return 1.5 })))
	for i, stage := range []string{"click", "install"} {
		s := "differential.stage.events.0." + stage + "."
		for _, m := range []string{"position", "lag", "mode_polling", "mode_switches", "processed", "skipped",
			"dead_lettered", "retries", "idle_releases", "in_flight"} {
			g(s+m, 1)
		}
		g(s+"watermark_unix_ms", now.UnixMilli())
		g(s+"last_progress_unix_ms", now.UnixMilli())
		if i > 0 {
			g(s+"gap_offsets", 3)
			g(s+"gap_ms", 1500)
			g(s+"key_gated", 0)
		}
	}
	metrics.GetOrRegisterCounter("differential.txn.committed", reg).Inc(4)
	metrics.GetOrRegisterCounter("differential.txn.aborted.commit", reg)
	metrics.GetOrRegisterCounter("differential.txn.fenced", reg)
	metrics.GetOrRegisterHistogram("differential.txn.cycle_ms", reg, metrics.NewUniformSample(10)).Update(250)
	metrics.GetOrRegisterHistogram("differential.txn.records", reg, metrics.NewUniformSample(10)).Update(9)
	for _, m := range []string{"counted", "late", "keys", "state_bytes"} {
		g("differential.window.velocity."+m, 2)
	}
	g("differential.velocity.alerts", 1)
	for _, suffix := range []string{"", "-for-broker-1"} {
		for _, m := range []string{"incoming-byte-rate", "outgoing-byte-rate", "request-rate", "response-rate", "protocol-requests-rate-3"} {
			metrics.GetOrRegisterMeter(m+suffix, reg).Mark(1)
		}
		for _, m := range []string{"request-size", "request-latency-in-ms", "response-size"} {
			metrics.GetOrRegisterHistogram(m+suffix, reg, metrics.NewUniformSample(10)).Update(12)
		}
		metrics.GetOrRegisterCounter("requests-in-flight"+suffix, reg)
	}
	metrics.GetOrRegisterMeter("consumer-fetch-rate-for-broker-1", reg).Mark(1)
	for _, suffix := range []string{"", "-for-topic-differential-attribution_events_state"} {
		for _, m := range []string{"batch-size", "records-per-request", "compression-ratio"} {
			metrics.GetOrRegisterHistogram(m+suffix, reg, metrics.NewUniformSample(10)).Update(150)
		}
		metrics.GetOrRegisterMeter("record-send-rate"+suffix, reg).Mark(1)
	}
	metrics.GetOrRegisterMeter("consumer-fetch-rate-for-topic-events", reg).Mark(1)
	for _, m := range []string{"consumer-batch-size", "consumer-fetch-response-size", "throttle-time-in-ms"} {
		metrics.GetOrRegisterHistogram(m, reg, metrics.NewUniformSample(10)).Update(5)
	}
	for _, m := range saramaGroupMetrics {
		metrics.GetOrRegisterCounter(m+"differential-attribution", reg).Inc(1)
	}
	return reg
}

// TestExpositionLints serves every series the engine and sarama make, with
// a partition that waits for its first record and the build information,
// through Handler (beside go_* and process_*), and lints the result with
// Lint and with client_golang's promlint; every family has a HELP text of
// its own, times are in seconds, and the changelog topic keeps its name.
func TestExpositionLints(t *testing.T) {
	reg := engineRegistry(t)
	o := Options{
		Topics: []string{"events", "differential-attribution.events.state"},
		Stats: func() []chain.PartitionStats {
			return []chain.PartitionStats{
				{Topic: "events", Partition: 0, Stages: []chain.StageStats{{Name: "click"}, {Name: "install"}}},
				{Topic: "events", Partition: 1, HighWatermark: 0, Committed: -1}, // waits for its first record
			}
		},
		Stages:    []string{"click", "install"},
		BuildInfo: map[string]string{"version": "0.1.0", "revision": "abc", "goversion": "go1.25"},
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	Handler(reg, o).ServeHTTP(rec, req)
	body := rec.Body.String()

	problems, err := Lint(strings.NewReader(body))
	require.NoError(t, err)
	require.Empty(t, problems, body)
	pl, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	require.Empty(t, pl, "promlint")

	for _, line := range strings.Split(body, "\n") {
		if h, ok := strings.CutPrefix(line, "# HELP "); ok {
			require.NotContains(t, h, "registered as", "a HELP text of its own: %s", line)
			require.NotContains(t, h, " ms.", line)
			require.NotContains(t, h, " ms ", line)
		}
	}
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	for name := range fams {
		require.False(t, strings.HasSuffix(name, "_ms") || strings.Contains(name, "_in_ms") || strings.Contains(name, "_unix_"), name)
	}
	click0 := map[string]string{"topic": "events", "partition": "0", "stage": "click"}
	require.Equal(t, float64(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).Unix()), sampleValue(t, fams, "differential_stage_watermark_timestamp_seconds", click0))
	require.Equal(t, 1.5, sampleValue(t, fams, "differential_stage_gap_seconds", map[string]string{"topic": "events", "partition": "0", "stage": "install"}))
	require.InDelta(t, 0.25, fams["differential_txn_cycle_seconds"].Metric[0].GetSummary().GetSampleSum(), 1e-9)
	require.Equal(t, 4.0, sampleValue(t, fams, "differential_txn_committed_total", nil))
	require.Equal(t, 0.0, sampleValue(t, fams, "differential_txn_aborted_total", map[string]string{"cause": "commit"}))
	require.Equal(t, 1.0, sampleValue(t, fams, "sarama_records_sent_total", map[string]string{"topic": "differential-attribution.events.state"}))
	require.NotContains(t, body, "differential-attribution_events_state")
	require.InDelta(t, 1.5, fams["sarama_compression_ratio"].Metric[0].GetSummary().GetSampleSum(), 1e-9)
	require.Equal(t, 1.0, sampleValue(t, fams, "differential_build_info", map[string]string{"version": "0.1.0", "revision": "abc", "goversion": "go1.25"}))

	// The waiting partition has zero-valued series; the started one keeps
	// its registry values.
	click1 := map[string]string{"topic": "events", "partition": "1", "stage": "click"}
	install1 := map[string]string{"topic": "events", "partition": "1", "stage": "install"}
	require.Equal(t, 0.0, sampleValue(t, fams, "differential_stage_lag", click1))
	require.Equal(t, 0.0, sampleValue(t, fams, "differential_stage_lag", install1))
	require.Equal(t, 0.0, sampleValue(t, fams, "differential_stage_processed_total", install1))
	require.Equal(t, 0.0, sampleValue(t, fams, "differential_stage_gap_offsets", install1))
	require.Equal(t, -1.0, sampleValue(t, fams, "differential_partition_committed", map[string]string{"topic": "events", "partition": "1"}))
	require.Equal(t, 1.0, sampleValue(t, fams, "differential_stage_lag", click0))
	require.Len(t, fams["differential_stage_lag"].Metric, 4)
}
