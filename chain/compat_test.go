package chain_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/store"
)

// compatTester builds the keyed three-stage chain of unreleasableRecs,
// with chain.WithoutCarriedOffsets at every Start while *compat is true.
// click@0 takes 5 ms on a stage with 4 workers per key group, so click@1
// completes above the click stage's position meanwhile.
func compatTester(t *testing.T, r *recorder, compat *bool, opts ...chain.Option) *chaintest.Tester {
	gates := [3]chain.GateScope{"", chain.GateKey, chain.GateKey}
	cost := func(stage string, o int64) time.Duration {
		if stage == "click" && o == 0 {
			return 5 * time.Millisecond
		}
		return 0
	}
	stages := keyedStages(r, true, 4, cost, gates)
	return chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) {
		if *compat {
			o = append(o, chain.WithoutCarriedOffsets())
		}
		return chain.New(stages, testDecoder, o...)
	}, append([]chain.Option{chain.WithStore(store.NewMemory()), chain.WithLateness(time.Hour),
		chain.WithIdleTimeout(time.Hour), chain.WithCommitInterval(time.Millisecond)}, opts...)...)
}

func requireNoDfl3(t *testing.T, cs []chaintest.Commit) {
	t.Helper()
	for _, c := range cs {
		require.False(t, strings.HasPrefix(c.Metadata, "dfl3:") || strings.HasPrefix(c.Metadata, "dfl4:"), "compat mode wrote dfl3 or dfl4 at offset %d: %q", c.Offset, c.Metadata)
	}
}

// TestWithoutCarriedOffsetsWritesNoDfl3AndCleanStopRepeatsNothing: the
// rolling-upgrade compatibility mode keeps the admission step and carries
// no completed-above sets, so no committed metadata (checkpoints and the
// final commit) is dfl3 — a binary before dfl3 reads all of it — through a
// run with records waiting in key gates and completions above the
// positions (install@3, purchase@4 in the default mode); and the clean
// stop drains to a contiguous set, so the restart repeats nothing.
func TestWithoutCarriedOffsetsWritesNoDfl3AndCleanStopRepeatsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		compat := true
		tt := compatTester(t, r, &compat)
		tt.Start(0)
		tt.Append(0, unreleasableRecs()...)
		synctest.Wait()
		time.Sleep(10 * time.Millisecond) // checkpoints at the commit interval (fake time)
		synctest.Wait()
		require.NoError(t, tt.Stop())
		cs := tt.Commits(0)
		require.NotEmpty(t, cs)
		requireNoDfl3(t, cs)

		restartRunsUnreleasableRecsOnce(t, tt, r, func(cs []chaintest.Commit) { requireNoDfl3(t, cs) })
	})
}

// TestWithoutCarriedOffsetsHonoursRestoredDfl3Set: a member in the default
// mode stops with dfl3 metadata carrying install@3 and purchase@4 (above
// the positions); a compat-mode member restores it. The carried records
// are not processed again; while its positions stay below them its
// checkpoints and final commit keep them (dfl3: dropping them would repeat
// them after the next move), and once the positions pass them it writes
// no dfl3 any more. Across the three runs every record runs once per
// stage: no repeats, no skips.
func TestWithoutCarriedOffsetsHonoursRestoredDfl3Set(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		compat := false
		tt := compatTester(t, r, &compat)
		tt.Start(0)
		tt.Append(0, unreleasableRecs()...)
		synctest.Wait()
		require.NoError(t, tt.Stop())
		cs := tt.Commits(0)
		require.True(t, strings.HasPrefix(cs[len(cs)-1].Metadata, "dfl3:"), "the default mode carried the set: %q", cs[len(cs)-1].Metadata)

		// A compat-mode member: nothing lets install@2 through, so the
		// restored offsets stay above the positions through checkpoints
		// and the final commit.
		compat = true
		n := len(cs)
		tt.Start(0)
		tt.Append(0, chaintest.Rec("u5", ev("click", 10), base)) // 6: moves the click stage only
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.NoError(t, tt.Stop())
		cs = tt.Commits(0)
		require.Greater(t, len(cs), n)
		for _, c := range cs[n:] {
			require.True(t, strings.HasPrefix(c.Metadata, "dfl3:"), "the restored set is kept while above the position: %q", c.Metadata)
		}
		require.Equal(t, map[int64]int{3: 1}, r.callsOf("install"), "install@3 not processed again")
		require.Equal(t, map[int64]int{4: 1}, r.callsOf("purchase"), "purchase@4 not processed again")

		// Again in compat mode: the positions pass the set.
		n = len(cs)
		tt.Start(0)
		tt.Append(0, chaintest.Rec("u9", ev("click", 100000), base))
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		cs = tt.Commits(0)
		require.Equal(t, int64(8), cs[len(cs)-1].Offset)
		require.False(t, strings.HasPrefix(cs[len(cs)-1].Metadata, "dfl3:"), "past the set: no dfl3 %q", cs[len(cs)-1].Metadata)
		require.Equal(t, map[int64]int{0: 1, 1: 1, 6: 1, 7: 1}, r.callsOf("click"))
		require.Equal(t, map[int64]int{2: 1, 3: 1}, r.callsOf("install"), "each install once")
		require.Equal(t, map[int64]int{4: 1, 5: 1}, r.callsOf("purchase"), "each purchase once")
		got := map[string]int{}
		for _, m := range tt.Outputs("output") {
			got[string(m.Value)]++
		}
		require.Equal(t, map[string]int{"click@0": 1, "click@1": 1, "install@2": 1, "install@3": 1, "purchase@4": 1, "purchase@5": 1, "click@6": 1, "click@7": 1}, got)
	})
}
