package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeavyKeyReports: the heavykey command measures a small workload,
// checks it against the reference model and prints the per-class table;
// bad flags exit 2.
func TestHeavyKeyReports(t *testing.T) {
	code, out, errs := runCLI(t, hooks{}, "heavykey", "--records", "4000", "--partitions", "2", "--commit-every", "500")
	require.Equal(t, exitOK, code, errs)
	for _, s := range []string{"| install | heavy key |", "| purchase | other keys, same partition |",
		"heavy key ÷ other keys of its partition", "verified: partition"} {
		require.Contains(t, out, s)
	}
	code, _, errs = runCLI(t, hooks{}, "heavykey", "--share", "1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "--share must be in (0, 1)")
}
