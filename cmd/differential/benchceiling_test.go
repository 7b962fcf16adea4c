package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
)

// TestBenchCeilingIsHidden: the child command of bench's ceilings is not
// listed by help, and a spec it cannot run is a usage error (exit 2) that
// says what is wrong, with nothing on stdout.
func TestBenchCeilingIsHidden(t *testing.T) {
	_, out, _ := runCLI(t, hooks{}, "help")
	require.NotContains(t, out, benchCeilingName)
	require.Contains(t, out, "bench ")

	for _, c := range []struct{ stdin, want string }{
		{"", "no spec on stdin"},
		{`{"kind":"noop"}`, `kind: want "raw" or "noop_chain", got "noop"`},
	} {
		var stdout, stderr testutil.SyncBuffer
		code := cli(context.Background(), []string{benchCeilingName}, &env{stdout: &stdout, stderr: &stderr, stdin: strings.NewReader(c.stdin)})
		require.Equal(t, exitUsage, code, stderr.String())
		require.Contains(t, stderr.String(), "differential bench-ceiling: bench: ceiling spec: ")
		require.Contains(t, stderr.String(), c.want)
		require.Empty(t, stdout.String())
	}
}

// TestBenchBinaryRunsCeilingsInChildProcesses: the built binary's bench
// runs every ceiling pass in a child process of its own (its hidden
// bench-ceiling), reports that figure, and the in-process pairs beside it.
func TestBenchBinaryRunsCeilingsInChildProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workload B of the benchmark (about 10 s)")
	}
	bin := binary(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	args := []string{"bench", "--workloads", "B", "--quick", "--no-latency", "--records", "3000", "--sweep", "500", "--json", jsonPath}
	if env := os.Getenv(testbroker.EnvBrokers); env != "" {
		args = append(args, "--brokers", env)
	}
	cmd := exec.Command(bin, args...)
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), tail(stderr.String()))
	require.Contains(t, stdout.String(), "raw consumer (own process: its cpu, its heap)")
	require.Contains(t, stdout.String(), "each pass in a fresh child process")
	require.Contains(t, stderr.String(), "bench [child ")

	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var ws []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &ws))
	require.Len(t, ws, 1)
	w := ws[0]
	require.JSONEq(t, `"child process"`, string(w["ceiling_method"]))
	var r float64
	require.NoError(t, json.Unmarshal(w["ratio_noop_raw"], &r))
	require.Positive(t, r)
	for k, n := range map[string]int{"noop_raw_pairs": 10, "noop_raw_balanced": 5} {
		var q []float64
		require.NoError(t, json.Unmarshal(w[k], &q), k)
		require.Len(t, q, n, k)
	}
	for k, own := range map[string]bool{"raw": true, "noop_chain": true} {
		var d struct {
			Records    int  `json:"records"`
			OwnProcess bool `json:"own_process"`
		}
		require.NoError(t, json.Unmarshal(w[k], &d), k)
		require.Equal(t, own, d.OwnProcess, k)
		require.Equal(t, 3000, d.Records, k)
	}
}
