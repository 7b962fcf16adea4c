package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// The "oversized" records `produce` writes with its defaults are oversized
// for `run` with its defaults: each is dead-lettered as too large, none is
// processed. (produce made them 65,537 bytes while run accepted up to
// 1,048,576, so they were attributed as installs.)
func TestProducedOversizedRecordsAreDeadLetteredByDefault(t *testing.T) {
	tp := newTopics(t, 2)
	code, _, errs := runCLI(t, hooks{}, "produce", "--brokers", tp.brokers, "--topic", tp.in, "--records", "6000", "--seed", "3")
	require.Equal(t, exitOK, code, errs)
	inputs, ends := tp.input(t)
	oversized := map[string]bool{}
	for _, recs := range inputs {
		for _, r := range recs {
			if len(r.Value) > attribution.DefaultMaxRecordBytes {
				oversized[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = false
			}
		}
	}
	require.NotEmpty(t, oversized, "the workload has oversized records")

	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: w.member().options()}, "run", "--brokers", tp.brokers, "--topic", tp.in,
		"--output", tp.out, "--dlq", tp.dlq, "--group", tp.group, "--state-dir", tp.stateDir,
		"--commit-interval", "100ms", "--idle-timeout", "100ms", "--log-format", "json") // --max-record-bytes: the default
	waitReached(t, p, w.reach(ends), "every partition's end")
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))

	for _, msgs := range tp.b.ReadAll(t, tp.dlq, false) {
		for _, m := range msgs {
			h := map[string]string{}
			for _, x := range m.Headers {
				h[string(x.Key)] = string(x.Value)
			}
			k := h[chain.HeaderDLQPartition] + "/" + h[chain.HeaderDLQOffset]
			if _, ok := oversized[k]; ok {
				require.True(t, strings.Contains(h[chain.HeaderDLQReason], "more than MaxRecordBytes"), "record %s: %s", k, h[chain.HeaderDLQReason])
				oversized[k] = true
			}
		}
	}
	for k, found := range oversized {
		require.True(t, found, "oversized record %s was not dead-lettered", k)
	}
	t.Logf("%d oversized records, each dead-lettered", len(oversized))
}
