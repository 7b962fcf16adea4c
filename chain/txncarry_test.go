package chain_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// TestExactlyOnceCarriesRestoredCompletedAbove: an at-least-once run of a
// key-scoped chain stops with install@2 (key b) done while install@0 and
// install@1 (key a) wait in the gate behind a slow click@0, so its commit
// carries 2 above the install stage's position. The group then runs in
// exactly-once mode: it skips install@2, and every cycle that commits an
// install position at or below 2 must still carry 2 above it — otherwise an
// abort and rewind to that cycle (injected here) or a restart after it
// processes install@2 again, and its output is visible twice to
// read_committed readers. After a clean stop and a second exactly-once
// run, every output is visible once and install@2 was processed once.
func TestExactlyOnceCarriesRestoredCompletedAbove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// click@0 outlasts the at-least-once stop's shutdown timeout.
		var slow atomic.Int64
		slow.Store(int64(10 * time.Second))
		r := newRecorder()
		cost := func(stage string, o int64) time.Duration {
			if stage == "click" && o == 0 {
				return time.Duration(slow.Load())
			}
			return 0
		}
		gates := [3]chain.GateScope{"", chain.GateKey, chain.GateKey}
		names := []string{"click", "install", "purchase"}
		tt := chaintest.New(t, keyedStages(r, true, 2, cost, gates), testDecoder,
			chain.WithLateness(time.Second), chain.WithCommitInterval(100*time.Millisecond), chain.WithShutdownTimeout(time.Second))
		tt.Start(0)
		tt.Append(0,
			chaintest.Rec("a", ev("click", 0), base),
			chaintest.Rec("a", ev("install", 1), base),
			chaintest.Rec("b", ev("install", 1), base),
			chaintest.Rec("c", ev("click", 100), base), // moves the click stage's stream time past the installs
		)
		// install@2 is done, click@0 still runs; the stop abandons it.
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, r.callsOf("install")[2], "install@2 processed before the stop")
		_ = tt.Stop()
		cs := tt.Commits(0)
		require.NotEmpty(t, cs)
		last := cs[len(cs)-1]
		cps, ok := commit.DecodeMetadata(last.Metadata, last.Offset, names)
		require.True(t, ok, "metadata %q", last.Metadata)
		require.Equal(t, int64(0), cps[1].Next, "install waits at 0")
		require.Equal(t, []int64{2, 3}, cps[1].Above, "the at-least-once commit carries install@2 (and the filtered 3)")
		atLeastOnce := len(cs)

		slow.Store(0)
		x := tt.UseTransactions()
		// The exactly-once run's first cycles come while its fetch is
		// stalled: every stage is still at its restored position.
		tt.Log(0).StallFetch()
		tt.Start(0)
		time.Sleep(time.Second)
		synctest.Wait()
		// The next commit fails: the cycle aborts and the partition
		// rewinds to the last committed cycle.
		var once sync.Once
		x.BeforeCommit(func() { once.Do(func() { x.FailCommits(1) }) })
		tt.Log(0).ResumeFetch()
		tt.WaitCommitted(0, 4)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		_, aborts := x.Counts()
		require.Positive(t, aborts, "a cycle aborted and rewound")

		tt.Start(0)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())

		seen := map[string]int{}
		for _, m := range tt.Outputs("output") {
			seen[string(m.Value)]++
		}
		require.Equal(t, map[string]int{"click@0": 1, "install@1": 1, "install@2": 1, "click@3": 1}, seen,
			"every output visible once")
		require.Equal(t, 1, r.callsOf("install")[2], "install@2 processed once across the runs")
		for _, c := range tt.Commits(0)[atLeastOnce:] {
			cps, ok := commit.DecodeMetadata(c.Metadata, c.Offset, names)
			require.True(t, ok, "metadata %q", c.Metadata)
			if cp := cps[1]; cp.Next <= 2 {
				require.True(t, slices.Contains(cp.Above, 2),
					"exactly-once commit at %d: install at %d does not carry 2 (above %v)", c.Offset, cp.Next, cp.Above)
			}
		}
	})
}
