package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/bench"
)

// TestBenchTableRendersTheJSONReport: bench-table reads what bench --json
// writes and prints one Markdown row per design run, with the run's figures.
func TestBenchTableRendersTheJSONReport(t *testing.T) {
	eff := 0.94
	ws := []bench.WorkloadResult{{Workload: "A", Partitions: 8, Workers: 64,
		Chain:     &bench.DesignResult{Design: "chain", Records: 22630, ThroughputRPS: 6008.4, Elapsed: 3.77, Syncs: 140, CheckpointsMost: 18, Commits: 55, CPUs: 2.81, PeakHeapMB: 69.4, Efficiency: &eff, Correctness: &bench.Correctness{OK: true, Outputs: 10, DeadLetters: 2}},
		Strongest: &bench.DesignResult{Design: "microbatch_strongest", BatchSize: 8000, Records: 16000, ThroughputRPS: 2796, Elapsed: 5.72, Correctness: &bench.Correctness{OK: false}},
	}}
	var js bytes.Buffer
	require.NoError(t, (&bench.Report{Workloads: ws}).WriteJSON(&js))
	path := filepath.Join(t.TempDir(), "latest.json")
	require.NoError(t, os.WriteFile(path, js.Bytes(), 0o600))

	code, out, errs := runCLI(t, hooks{}, "bench-table", "--json", path)
	require.Equal(t, exitOK, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Equal(t, "| A: 8 partitions, W=64 | chain | 22,630 | 6,008 | 3.77 | 140 (18) | 55 | 2.81 | 69.4 | 0.94 | – | ok 10+2 |", lines[2])
	require.Contains(t, lines[3], "| strongest micro-batch (batch 8000) | 16,000 | 2,796 |")
	require.True(t, strings.HasSuffix(lines[3], "| FAIL |"), lines[3])

	code, _, errs = runCLI(t, hooks{}, "bench-table")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "--json is required")
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))
	code, _, errs = runCLI(t, hooks{}, "bench-table", "--json", path)
	require.Equal(t, exitFatal, code)
	require.Contains(t, errs, "read the JSON report")
}
