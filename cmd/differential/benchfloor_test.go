package main

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// --floor-only and --cores: bad values are usage errors (exit 2) naming the
// flag, before anything is measured.
func TestBenchFloorFlagsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--floor-only", "--workloads", "A"}, `--floor-only measures workload B only, not "A"`},
		{[]string{"bench", "--cores", "0"}, "--cores: each count must be in [1, "},
		{[]string{"bench", "--cores", fmt.Sprint(runtime.NumCPU() + 1)}, "--cores: each count must be in [1, "},
		{[]string{"bench", "--cores", "1,1"}, "--cores: 1 given twice"},
		{[]string{"bench", "--cores", "1", "--workloads", "A,C"}, "--cores sweeps workload B"},
		{[]string{"bench", "--floor-only", "--eos-cost"}, "not --eos-cost"},
		{[]string{"bench", "--cores", "one"}, `invalid value "one" for flag --cores`},
	} {
		code, _, errs := runCLI(t, hooks{}, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errs)
		require.Contains(t, errs, tc.want, "%v", tc.args)
	}
}
