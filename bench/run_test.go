package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// TestQuick runs Quick mode end to end (what CI's smoke test does), on the
// real cluster DIFFERENTIAL_TEST_BROKERS names, else on the embedded
// broker: every design run must produce exactly the reference model's
// outputs and dead letters — nothing lost, duplicated or changed — and last
// at least Duration (sized by time) with the chain's busiest partition
// paying ten checkpoints or more; both comparisons and the sweep must be
// reported, and the JSON written (into a folder that does not exist
// yet). It does not check the ratios.
func TestQuick(t *testing.T) {
	brokers, dir, jsonPath := endToEnd(t, "runs the whole Quick benchmark (about a minute)", "bench.json")
	start := time.Now()
	o := Options{Quick: true, Brokers: brokers, JSONPath: jsonPath, Dir: dir}
	rep, err := Run(context.Background(), o)
	require.NoError(t, err)
	t.Logf("quick mode took %v", time.Since(start))
	o = o.withDefaults()

	require.NotEmpty(t, rep.Workloads)
	seen := map[string]bool{}
	for _, w := range rep.Workloads {
		seen[w.Workload] = true
		designs := map[string]*DesignResult{"chain": w.Chain, "strongest": w.Strongest, "design6": w.Design6}
		for name, d := range designs {
			require.NotNil(t, d, "%s: %s", w.Workload, name)
			c := d.Correctness
			require.NotNil(t, c, "%s %s", w.Workload, name)
			require.True(t, c.OK, "%s %s: %+v", w.Workload, name, c)
			require.Greater(t, c.Outputs, 0, "%s %s", w.Workload, name)
			require.Greater(t, d.ThroughputRPS, 0.0)
			require.GreaterOrEqual(t, d.Elapsed, o.Duration.Seconds(), "%s %s: sized by time", w.Workload, name)
			require.True(t, d.Steady, "%s %s", w.Workload, name)
			require.Positive(t, d.Syncs, "%s %s: checkpoints inside the window", w.Workload, name)
			if name != "strongest" { // its commits run in the background: the window may end first
				require.Positive(t, d.Commits, "%s %s: commits inside the window", w.Workload, name)
			}
		}
		require.GreaterOrEqual(t, w.Chain.CheckpointsMost, minCheckpoints, "%s: the chain's busiest partition", w.Workload)
		require.GreaterOrEqual(t, w.Chain.Commits, minCheckpoints, "%s: the chain's commits", w.Workload)
		require.Equal(t, 500, w.Design6.BatchSize)
		require.NotNil(t, w.VsStrongest, w.Workload)
		require.NotNil(t, w.VsDesign6, w.Workload)
		require.InDelta(t, w.Chain.ThroughputRPS/w.Strongest.ThroughputRPS, w.VsStrongest.Throughput, 1e-9)
		require.InDelta(t, w.Chain.ThroughputRPS/w.Design6.ThroughputRPS, w.VsDesign6.Throughput, 1e-9)

		require.Len(t, w.Sweep, len(o.SweepBatchSizes), w.Workload)
		chosen := 0
		for _, sp := range w.Sweep {
			if sp.Result == nil {
				require.NotEmpty(t, sp.Skipped)
				continue
			}
			require.True(t, sp.Result.Correctness.OK)
			require.LessOrEqual(t, sp.Result.ThroughputRPS, w.Strongest.ThroughputRPS, "the strongest is the sweep's best")
			if sp.Chosen {
				chosen++
				require.Same(t, sp.Result, w.Strongest)
			}
		}
		require.Equal(t, 1, chosen)
		if w.Workload != "C" {
			for _, c := range []*Comparison{w.VsStrongest, w.VsDesign6} {
				require.NotNil(t, c.Chain, "%s %s: latency", w.Workload, c.Baseline)
				require.NotNil(t, c.Base, "%s %s: latency", w.Workload, c.Baseline)
				require.NotNil(t, c.P99Lower, "%s %s", w.Workload, c.Baseline)
				for _, l := range []*LatencyResult{c.Chain, c.Base} {
					lc := l.Correctness
					require.NotNil(t, lc)
					require.Zero(t, lc.Missing+lc.Duplicates+lc.Unexpected+lc.OrderViolations, "%s %s latency run: %+v", w.Workload, c.Baseline, lc)
				}
			}
		}
		if w.Workload != "B" { // A and C compare the gate scopes: both chains measured and checked
			require.Len(t, w.ChainVariants, 2, w.Workload)
			require.Same(t, w.Chain, w.ChainVariants[0])
			require.Equal(t, string(o.Gate), w.Gate)
			for i, g := range []chain.GateScope{o.Gate, o.otherGate()} {
				v := w.ChainVariants[i]
				require.Equal(t, string(g)+" gate", v.Variant, w.Workload)
				require.True(t, v.Correctness.OK, "%s %s", w.Workload, v.Variant)
				require.True(t, v.Steady, "%s %s", w.Workload, v.Variant)
			}
		}
		if w.Workload == "A" {
			require.NotNil(t, w.Limit)
			require.LessOrEqual(t, w.Limit.ChainOrderRPS, w.Limit.KeyOrderRPS, "the key gate waits for a subset of what the partition gate waits for")
			require.Greater(t, w.Limit.MaxWin, 0.0)
			require.NotNil(t, w.Chain.Efficiency)
			require.NotNil(t, w.Strongest.EfficiencyOwn)
		}
	}
	require.Equal(t, map[string]bool{"A": true, "B": true, "C": true}, seen)

	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var objs []map[string]any
	require.NoError(t, json.Unmarshal(raw, &objs))
	require.Len(t, objs, len(rep.Workloads))
	for _, o := range objs {
		for _, k := range []string{"workload", "partitions", "workers", "chain", "microbatch_strongest", "microbatch_design6", "vs_strongest", "vs_design6"} {
			require.Contains(t, o, k)
		}
		for _, d := range []string{"chain", "microbatch_strongest", "microbatch_design6"} {
			m := o[d].(map[string]any)
			for _, k := range []string{"records", "throughput_rps", "elapsed_s", "steady", "checkpoint_syncs", "commits", "cpu_s", "peak_heap_mb", "efficiency"} {
				require.Contains(t, m, k, "%s.%s", d, k)
			}
		}
		if o["workload"] == "B" {
			require.Contains(t, o, "raw")
			require.Contains(t, o, "ratio_noop_raw")
			require.Contains(t, o, "ratio_polling")
		}
	}
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	for _, s := range []string{"workload A", "batch size sweep", "← the strongest", "the headline", "the design the engine replaces", "the limit", "targets"} {
		require.Contains(t, table.String(), s)
	}
}

// TestRunChecksOutputPathsFirst: a path that cannot be written fails Run
// before anything is measured (a fresh clone has no bench/results folder:
// it is created).
func TestRunChecksOutputPathsFirst(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	start := time.Now()
	_, err := Run(context.Background(), Options{JSONPath: filepath.Join(blocker, "sub", "bench.json")})
	require.ErrorContains(t, err, "bench.json")
	require.Less(t, time.Since(start), 5*time.Second, "failed before measuring")

	require.NoError(t, checkWritable(filepath.Join(dir, "results", "deep", "latest.json")))
	require.DirExists(t, filepath.Join(dir, "results", "deep"))
	entries, err := os.ReadDir(filepath.Join(dir, "results", "deep"))
	require.NoError(t, err)
	require.Empty(t, entries, "the probe file is removed")
}
