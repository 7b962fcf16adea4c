package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// TestMetricsAndHealth runs `run --metrics-addr` with the purchase stage
// blocked on one partition (at least once) and the others at their ends: /metrics serves the engine's per-stage and
// per-partition series and sarama's client metrics from the one registry,
// and the Go runtime's and the process's series;
// /healthz (and /readyz) is 200 while the blocked stage is within the stall timeout, 503
// naming the partition and stage once it is not (the health check's clock
// is moved forward instead of waiting a minute), and once the stage is
// released and has caught up no stage is stalled (no lag), and 200 again
// on the real clock (every partition's leader answers its probe); /livez
// is 200 throughout, when every partition's leader seems not to answer too.
func TestMetricsAndHealth(t *testing.T) {
	tp := newTopics(t, 3)
	tp.produce(t, 3000, 5)
	_, ends := tp.input(t)

	var skew atomic.Int64 // added to the health check's clock
	addrs := make(chan string, 1)
	pz := newPauser("purchase", 50)
	w := newWatcher()
	p := startCLI(t, hooks{
		chainOptions:     w.member().options(),
		wrapStages:       pz.wrap,
		metricsListening: func(a string) { addrs <- a },
		now:              func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
	}, tp.runArgs("--metrics-addr", "127.0.0.1:0", "--stall-timeout", "1m", "--guarantee", "at-least-once")...)
	base := "http://" + recv(t, addrs, "the metrics server")
	blocked := recv(t, pz.blocked, "the purchase stage to block")
	// The other partitions commit their ends, so their outputs have been
	// sent and acknowledged before the scrape and the producer's series
	// exist. (At least once: an exactly-once cycle spans the member's
	// partitions and waits for the blocked record.)
	others := maps.Clone(ends)
	delete(others, blocked)
	recv(t, w.reach(others), "the other partitions to commit their ends")

	status, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	for _, name := range []string{
		"differential_stage_position", "differential_stage_lag", "differential_stage_mode_polling",
		"differential_stage_watermark_timestamp_seconds", "differential_stage_processed_total", "differential_stage_in_flight", "differential_stage_key_gated",
		"differential_stage_last_progress_timestamp_seconds", "differential_partition_committed", "differential_partition_commits_total",
		"differential_partition_high_watermark", "sarama_consumer_group_sync_total", "sarama_request_latency_seconds",
		"sarama_incoming_bytes_total", "sarama_records_sent_total", "differential_build_info",
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
	} {
		require.Contains(t, fams, name, "series %s in:\n%s", name, body)
	}
	require.Contains(t, body, fmt.Sprintf(`differential_stage_position{partition="%d",stage="purchase",topic=%q}`, blocked, tp.in))
	require.Contains(t, body, fmt.Sprintf(`sarama_consumer_group_sync_total{group=%q} 1`, tp.group))
	problems, err := metricshttp.Lint(strings.NewReader(body))
	require.NoError(t, err)
	require.Empty(t, problems, "the exposition follows Prometheus' naming rules:\n%s", body)

	status, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status, body)
	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, body)

	skew.Store(int64(2 * time.Minute))
	status, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, fmt.Sprintf("%s/%d stage purchase: position ", tp.in, blocked))
	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, fmt.Sprintf("stalled %s/%d stage purchase: position ", tp.in, blocked))
	status, body = get(t, base+"/livez")
	require.Equal(t, http.StatusOK, status, "a stalled stage is no reason to restart: %s", body)

	close(pz.release)
	recv(t, w.reach(ends), "the group to commit every partition's end")
	// Still two minutes ahead, the clock finds no stage stalled (no lag,
	// however old its last progress looks); what it does find is that no
	// partition's leader has answered for "two minutes" (the leader probe
	// answers every second on the real clock), the rule that sees a dead
	// leader. Back on the real clock, the engine is healthy.
	status, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.NotContains(t, body, " stage ", "no lag, so no stage stalled, whatever the clock")
	for part := range tp.partitions {
		require.Contains(t, body, fmt.Sprintf("%s/%d: no answer from the partition's leader for 2m", tp.in, part))
	}
	// What a broker outage looks like: not ready, but alive (a liveness
	// probe on /healthz would restart every member).
	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, fmt.Sprintf("stalled %s/0: no answer from the partition's leader for 2m", tp.in))
	status, body = get(t, base+"/livez")
	require.Equal(t, http.StatusOK, status, body)
	skew.Store(0)
	status, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status, "no lag, leaders answering: %s", body)
	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if strings.HasSuffix(url, "/metrics") {
		require.Equal(t, metricshttp.ContentType, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, string(b)
}

// TestMetricsFollowRebalance: when a second member joins the group, the
// partitions it takes disappear from the first member's /metrics (the chain
// unregisters a revoked partition's series), and the first member keeps
// serving the series of the partitions it still owns.
func TestMetricsFollowRebalance(t *testing.T) {
	tp := newTopics(t, 4)
	tp.produce(t, 2000, 21)
	_, ends := tp.input(t)
	w := newWatcher()
	addrs := make(chan string, 1)
	a := startCLI(t, hooks{chainOptions: w.member().options(), metricsListening: func(s string) { addrs <- s }},
		tp.runArgs("--metrics-addr", "127.0.0.1:0", "--state-dir", t.TempDir())...)
	base := "http://" + recv(t, addrs, "the metrics server")
	recv(t, w.reach(ends), "the first member to finish the input")
	require.Equal(t, []int32{0, 1, 2, 3}, metricPartitions(t, base))

	b := startCLIWatching(t, hooks{chainOptions: w.member().options()}, `"msg":"partition started"`,
		tp.runArgs("--state-dir", t.TempDir())...)
	recv(t, b.logged, "the second member to start a partition")
	tp.produce(t, 2000, 22) // both members work after the rebalance
	_, ends = tp.input(t)
	recv(t, w.reach(ends), "the group to finish the input")

	var taken []int32
	for _, line := range strings.Split(b.err.String(), "\n") {
		var m struct {
			Msg       string `json:"msg"`
			Partition int32  `json:"partition"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "partition started" {
			taken = append(taken, m.Partition)
		}
	}
	slices.Sort(taken)
	kept := metricPartitions(t, base)
	_, body := get(t, base+"/metrics")
	require.Contains(t, body, "# TYPE differential_partition_restore_records_total counter")
	require.Contains(t, body, "# TYPE differential_partition_restore_duration_seconds gauge")
	t.Logf("second member took %v; first member's /metrics has %v", taken, kept)
	require.NotEmpty(t, taken)
	require.NotEmpty(t, kept)
	for _, p := range taken {
		require.NotContains(t, kept, p, "partition %d moved to the second member", p)
	}
	require.Len(t, append(taken, kept...), 4)
	require.Equal(t, exitOK, b.stop(t), tail(b.err.String()))
	require.Equal(t, exitOK, a.stop(t), tail(a.err.String()))

	// The moved partitions' window state followed them through the
	// changelog, so every output equals the reference model's, once.
	r := tp.check(t, reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	require.True(t, r.OK(), r.Summary())
	require.Contains(t, b.err.String(), "rebuilding from the changelog", "the move is logged")
	require.Contains(t, b.err.String(), `"msg":"partition state restored"`)
}

// metricPartitions returns the partitions with a differential_stage_position series.
func metricPartitions(t *testing.T, base string) []int32 {
	t.Helper()
	status, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	seen := map[int32]bool{}
	if f := fams["differential_stage_position"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "partition" {
					n, err := strconv.Atoi(l.GetValue())
					require.NoError(t, err)
					seen[int32(n)] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// TestMetricsOfAPartitionWithoutRecords: a partition that is assigned and
// restored but has had no record (its stages start at the first) has
// zero-valued series — lag 0, nothing processed — instead of none, the
// exactly-once series are there before any transaction, the exposition
// lints clean, and the member is ready.
func TestMetricsOfAPartitionWithoutRecords(t *testing.T) {
	tp := newTopics(t, 1)
	addrs := make(chan string, 1)
	p := startCLIWatching(t, hooks{metricsListening: func(a string) { addrs <- a }}, `"msg":"partition state restored"`,
		tp.runArgs("--metrics-addr", "127.0.0.1:0")...)
	base := "http://" + recv(t, addrs, "the metrics server")
	recv(t, p.logged, "the partition's state to be restored")

	status, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	problems, err := metricshttp.Lint(strings.NewReader(body))
	require.NoError(t, err)
	require.Empty(t, problems, body)
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		require.True(t, ok, "series %s in:\n%s", name, body)
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				if m.Counter != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no series %s%v in:\n%s", name, labels, body)
		return 0
	}
	for _, stage := range []string{"click", "install", "purchase"} {
		l := map[string]string{"topic": tp.in, "partition": "0", "stage": stage}
		require.Equal(t, 0.0, value("differential_stage_lag", l), stage)
		require.Equal(t, 0.0, value("differential_stage_processed_total", l), stage)
	}
	require.Equal(t, -1.0, value("differential_partition_committed", map[string]string{"topic": tp.in, "partition": "0"}))
	require.Equal(t, 0.0, value("differential_txn_committed_total", nil))
	require.Equal(t, 0.0, value("differential_txn_aborted_total", map[string]string{"cause": "commit"}))
	require.Contains(t, fams, "differential_txn_cycle_seconds")

	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
	status, body = get(t, base+"/livez")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
}
