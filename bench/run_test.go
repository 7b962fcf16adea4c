package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuickEmbedded runs Quick mode end to end on the embedded broker (what
// CI's smoke test does): every design run must produce exactly the reference
// model's outputs and dead letters — nothing lost, duplicated or changed —
// and the JSON and SVG must be written. It does not check the ratios.
func TestQuickEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole Quick benchmark (about a minute)")
	}
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.svg")
	start := time.Now()
	rep, err := Run(context.Background(), Options{Quick: true, JSONPath: jsonPath, SVGPath: svgPath, Dir: dir})
	require.NoError(t, err)
	t.Logf("quick mode took %v", time.Since(start))

	require.NotEmpty(t, rep.Workloads)
	seen := map[string]bool{}
	for _, w := range rep.Workloads {
		seen[w.Workload] = true
		require.NotNil(t, w.Chain, "%s: chain", w.Workload)
		require.NotNil(t, w.MicroBatch, "%s: micro-batch", w.Workload)
		for name, d := range map[string]*DesignResult{"chain": w.Chain, "microbatch": w.MicroBatch} {
			c := d.Correctness
			require.NotNil(t, c, "%s %s", w.Workload, name)
			require.True(t, c.OK, "%s %s: %+v", w.Workload, name, c)
			require.Greater(t, c.Outputs, 0, "%s %s", w.Workload, name)
			require.Greater(t, d.ThroughputRPS, 0.0)
			require.NotNil(t, d.P99ms, "%s %s: latency", w.Workload, name)
			lc := d.LatencyCorrectness
			require.NotNil(t, lc)
			require.Zero(t, lc.Missing+lc.Duplicates+lc.Unexpected+lc.OrderViolations, "%s %s latency run: %+v", w.Workload, name, lc)
		}
		require.Equal(t, *w.Chain.Correctness, *w.MicroBatch.Correctness, "%s: both designs agree", w.Workload)
	}
	require.Equal(t, map[string]bool{"A": true, "B": true, "C": true}, seen)

	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var objs []map[string]any
	require.NoError(t, json.Unmarshal(raw, &objs))
	require.Len(t, objs, len(rep.Workloads))
	for _, o := range objs {
		for _, k := range []string{"workload", "records", "partitions", "workers", "chain", "microbatch", "ratio_throughput", "ratio_p99"} {
			require.Contains(t, o, k)
		}
		for _, d := range []string{"chain", "microbatch"} {
			m := o[d].(map[string]any)
			for _, k := range []string{"throughput_rps", "p50_ms", "p99_ms", "cpu_s", "peak_heap_mb", "efficiency"} {
				require.Contains(t, m, k, "%s.%s", d, k)
			}
		}
		if o["workload"] == "B" {
			require.Contains(t, o, "raw")
			require.Contains(t, o, "ratio_noop_raw")
			require.Contains(t, o, "ratio_polling")
		}
	}
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(svg, []byte("<svg")) && bytes.Contains(svg, []byte("</svg>")))
	require.Contains(t, string(svg), "<polyline")

	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "workload A")
	require.Contains(t, table.String(), "targets")
}
