package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/processors/attribution/reference"
)

func TestDemoVerifiesAndReports(t *testing.T) {
	code, out, errs := runCLI(t, hooks{}, "demo", "--records", "5000", "--partitions", "3", "--seed", "2")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "Differential demo: 5,000 records, 3 partitions, seed 2")
	require.Contains(t, out, "gate, exactly-once (outputs read back read_committed)", "exactly-once by default")
	require.Contains(t, out, "verification    OK")
	require.Regexp(t, `outputs\s+[\d,]+ = [\d,]+ installs \(`, out)
	require.Regexp(t, `dead-lettered\s+[1-9]`, out)
	requireReportAddsUp(t, out)
	require.Contains(t, errs, "click pos 5,000", "the progress shows every stage at the end")
}

// The demo runs at-least-once one flag away, and verifies all the same.
func TestDemoAtLeastOnce(t *testing.T) {
	code, out, errs := runCLI(t, hooks{}, "demo", "--records", "2000", "--partitions", "2", "--guarantee", "at-least-once")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "gate, at-least-once\n")
	require.Contains(t, out, "verification    OK")
}

// TestDemoFailsWhenAnOutputIsLost breaks the demo's read-back on purpose
// (a test-only hook): the demo must exit 1 and report the lost output.
func TestDemoFailsWhenAnOutputIsLost(t *testing.T) {
	drop := func(recs []reference.Written) []reference.Written { return slices.Delete(recs, 10, 11) }
	code, out, errs := runCLI(t, hooks{tamperOutputs: drop}, "demo", "--records", "2000", "--partitions", "2")
	require.Equal(t, exitFatal, code)
	require.Contains(t, out, "verification    FAILED: 1 problem(s)")
	require.Contains(t, out, "lost: no ")
	require.Contains(t, errs, "verification failed")
}

// TestDemoGateScopes runs the demo through Kafka (the embedded broker, or
// DIFFERENTIAL_TEST_BROKERS) under both gate scopes with key-parallel
// stages: each run's outputs and dead letters must equal the reference
// model's record for record, one user's outputs in offset order (the
// demo's verification) — so the key-scoped gate and the partition gate
// give the same results on a real consumer group, producer and commits.
func TestDemoGateScopes(t *testing.T) {
	for _, gate := range []string{"key", "partition"} {
		t.Run(gate, func(t *testing.T) {
			code, out, errs := runCLI(t, hooks{}, "demo", "--records", "6000", "--partitions", "3", "--seed", "5",
				"--key-concurrency", "8", "--gate", gate)
			require.Equal(t, exitOK, code, errs)
			require.Contains(t, out, "key concurrency 8, "+gate+" gate")
			require.Contains(t, out, "verification    OK")
			require.Regexp(t, `outputs\s+[1-9][\d,]* = [\d,]+ installs \(`, out)
			requireReportAddsUp(t, out)
		})
	}
}
