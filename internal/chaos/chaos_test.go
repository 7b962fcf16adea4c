package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/differential-dev/differential/internal/chaos"
)

// EnvChaos turns the fault-injection suite on; it needs a JDK and Kafka's
// jars (scripts/kafka.sh fetch) and takes minutes.
const EnvChaos = "DIFFERENTIAL_CHAOS"

// EnvBreak names a way to break the engine on purpose (a CLI built with the
// chaosbreak tag): the suite then passes only if every scenario's check
// catches it.
const EnvBreak = "DIFFERENTIAL_CHAOS_BREAK"

// breaks are the modes of cmd/differential's chaosbreak build, and what the
// check must report for each.
var breaks = map[string]func(chaos.Verdict) bool{
	// every 500th output after the first fault is acknowledged unsent
	"drop-output": func(v chaos.Verdict) bool { return v.Missing > 0 },
	// every 500th output after the first fault is written twice, the second copy changed
	"conflicting-duplicate": func(v chaos.Verdict) bool { return v.ConflictingDuplicates > 0 },
}

// TestFaultInjection runs every scenario of chaos.Scenarios on a real
// 3-node cluster — scripts/kafka.sh's, with the DIFFERENTIAL_KAFKA_*
// settings of the environment; started (and stopped) here unless one runs
// — and prints the summary table. DIFFERENTIAL_CHAOS_REPORT=file also
// writes the table there. Run one scenario with
// -run 'TestFaultInjection/<name>'.
func TestFaultInjection(t *testing.T) {
	if os.Getenv(EnvChaos) != "1" {
		t.Skipf("the fault-injection suite runs only with %s=1 (it starts a 3-node Kafka cluster)", EnvChaos)
	}
	breakMode := os.Getenv(EnvBreak)
	caught, known := breaks[breakMode]
	if breakMode != "" && !known {
		t.Fatalf("%s=%q: not one of drop-output, conflicting-duplicate", EnvBreak, breakMode)
	}
	ctx := context.Background()
	dir := os.Getenv("DIFFERENTIAL_CHAOS_LOGS") // engine logs and state kept there
	if dir == "" {
		dir = t.TempDir()
	}
	bin := buildCLI(t, dir, breakMode != "")

	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := chaos.OpenCluster(ctx, filepath.Join(repo, "scripts", "kafka.sh"), nil, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	cfg := &chaos.Config{
		Cluster: cluster, Bin: bin, Dir: dir,
		Records: 40_000, Partitions: 4, Users: 2_000,
		Warmup: 1_000, Burst: 50, Tick: 500 * time.Millisecond, TailFrac: 0.05,
		CommitInterval: 200 * time.Millisecond,
		// Above every stall a schedule injects (a 15 s pause, sarama's 30 s
		// request timeout behind it, node restarts of up to a minute on a
		// loaded machine): no follower is released by idleness, so the
		// outputs cannot depend on timing. The end markers (see chaos.Run)
		// let the tail pass without it.
		IdleTimeout: 4 * time.Minute,
		// A real outage (a leader election takes 9 s) shows; a busy
		// 2-core machine's hiccups mostly do not.
		StallTimeout: 5 * time.Second,
		StepTimeout:  2 * time.Minute,
		Check:        chaos.ReferenceCheck,
		Logf:         t.Logf,
	}
	if breakMode != "" {
		cfg.BreakMarker = filepath.Join(dir, "break-now")
		cfg.BreakEnv = []string{"DIFFERENTIAL_BREAK=" + breakMode, "DIFFERENTIAL_BREAK_AFTER=" + cfg.BreakMarker}
	}

	var results []*chaos.Result
	for _, sc := range chaos.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			if err := cluster.Heal(ctx); err != nil {
				t.Fatalf("the cluster is not whole before the scenario: %v", err)
			}
			cfg.Logf = t.Logf
			res := chaos.Execute(ctx, cfg, sc)
			results = append(results, res)
			t.Logf("%s: %d records in, %d outputs read (%d matched), repeats %d identical / %d conflicting, %d dead letters, took %s",
				sc.Name, res.RecordsIn, res.Outputs, res.Verdict.Outputs, res.Verdict.IdenticalDuplicates,
				res.Verdict.ConflictingDuplicates, res.DeadLetters, res.Took.Round(100*time.Millisecond))
			for _, f := range res.Faults {
				t.Logf("  +%5.1fs %s: recovered after %.1fs", f.At.Seconds(), f.What, f.Recovery.Seconds())
			}
			t.Logf("  /healthz: %s", strings.Join(res.Health, " → "))
			switch {
			case breakMode == "" && res.Err != nil:
				t.Fatal(res.Err)
			case breakMode != "" && res.Err == nil:
				t.Fatalf("the engine was broken on purpose (%s) and the scenario passed: its check cannot fail", breakMode)
			case breakMode != "" && !caught(res.Verdict):
				t.Fatalf("the engine was broken on purpose (%s) and the scenario failed otherwise: %v", breakMode, res.Err)
			case breakMode != "":
				t.Logf("caught, as it must be: %s", firstLines(res.Err.Error(), 6))
			}
		})
	}
	table := chaos.Table(results)
	t.Logf("summary (2-core VM; %d records, %d partitions per scenario):\n%s", cfg.Records, cfg.Partitions, table)
	if path := os.Getenv("DIFFERENTIAL_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// buildCLI builds cmd/differential once (with the chaosbreak tag when the
// engine is to break itself).
func buildCLI(t *testing.T, dir string, broken bool) string {
	t.Helper()
	bin := filepath.Join(dir, "differential")
	args := []string{"build", "-o", bin}
	if broken {
		args = append(args, "-tags", "chaosbreak")
	}
	cmd := exec.Command("go", append(args, "github.com/differential-dev/differential/cmd/differential")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}
