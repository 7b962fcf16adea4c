package chain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/store"
)

// unreleasableRecs: install@2 of u1 has an event time whose q(t+Lateness)
// is never read in the first run (nothing later than 5000 s), so it waits
// in the install stage's gate until the stop; purchase@5 of u1 queues
// behind it. install@3 (u2) and purchase@4 (u3) are released and complete
// above the install and purchase stages' positions.
func unreleasableRecs() []chain.Record {
	return []chain.Record{
		chaintest.Rec("u1", ev("click", 0), base),
		chaintest.Rec("u2", ev("click", 5000), base),
		chaintest.Rec("u1", ev("install", 4000), base), // needs a time > 7600
		chaintest.Rec("u2", ev("install", 1000), base), // needs > 4600: 5000
		chaintest.Rec("u3", ev("purchase", 100), base), // needs > 3700 at install
		chaintest.Rec("u1", ev("purchase", 200), base), // behind install@2
	}
}

// TestCleanStopAbandonsUnreleasableGatedRecordRepeatsNothing: without the
// admission step a key-scoped follower begins records its leader may never
// let through before a stop (here: nothing more to read, idle release far
// off). The stop abandons them and the records of their key behind them;
// what completed above them is carried by the final commit's metadata and
// checkpoint, so the restart processes every record exactly once per stage
// and produces every output exactly once (I6). With the sets dropped from
// the metadata it fails: install@3 and purchase@4 run twice.
func TestCleanStopAbandonsUnreleasableGatedRecordRepeatsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		gates := [3]chain.GateScope{"", chain.GateKey, chain.GateKey}
		tt := chaintest.New(t, keyedStages(r, true, 0, nil, gates), testDecoder,
			chain.WithStore(store.NewMemory()), chain.WithLateness(time.Hour), chain.WithIdleTimeout(time.Hour))
		recs := unreleasableRecs()
		tt.Start(0)
		tt.Append(0, recs...)
		synctest.Wait()
		st := tt.Stats()[0].Stages
		require.Equal(t, 2, st[1].KeyGated, "install@2 and purchase@5 wait at install")
		require.NoError(t, tt.Stop())
		require.Equal(t, map[int64]int{3: 1}, r.callsOf("install"))
		require.Equal(t, map[int64]int{4: 1}, r.callsOf("purchase"))
		commits := tt.Commits(0)
		last := commits[len(commits)-1]
		require.Equal(t, int64(2), last.Offset)
		require.True(t, strings.HasPrefix(last.Metadata, "dfl3:"), "the metadata carries the offsets completed above: %q", last.Metadata)

		// The restart: a click far in the future makes everything known.
		restartRunsUnreleasableRecsOnce(t, tt, r, nil)
	})
}

// restartRunsUnreleasableRecsOnce restarts a tester that stopped on
// unreleasableRecs, appends a click far in the future (everything becomes
// known), stops it again and checks that across both runs every record ran
// once per stage, every output was produced once and the last commit is at
// the end. check, when not nil, is given the second run's commits first.
func restartRunsUnreleasableRecsOnce(t *testing.T, tt *chaintest.Tester, r *recorder, check func([]chaintest.Commit)) {
	t.Helper()
	tt.Start(0)
	tt.Append(0, chaintest.Rec("u9", ev("click", 100000), base))
	tt.WaitIdle()
	require.NoError(t, tt.Stop())
	commits := tt.Commits(0)
	if check != nil {
		check(commits)
	}
	require.Equal(t, map[int64]int{0: 1, 1: 1, 6: 1}, r.callsOf("click"))
	require.Equal(t, map[int64]int{2: 1, 3: 1}, r.callsOf("install"), "each install once across the restart")
	require.Equal(t, map[int64]int{4: 1, 5: 1}, r.callsOf("purchase"), "each purchase once across the restart")
	got := map[string]int{}
	for _, m := range tt.Outputs("output") {
		got[string(m.Value)]++
	}
	require.Equal(t, map[string]int{"click@0": 1, "click@1": 1, "install@2": 1, "install@3": 1, "purchase@4": 1, "purchase@5": 1, "click@6": 1}, got)
	require.Equal(t, int64(7), commits[len(commits)-1].Offset)
}

// TestCrashAfterCheckpointWithSetLosesAndRepeatsNothing: a checkpoint
// carries install@3 and purchase@4 (completed above the positions, their
// state writes persisted with them); the run then dies with a record
// processed but never acknowledged (the shutdown timeout abandons it, as a
// crash would: its state write is not persisted). Each stage keeps a
// per-user list of the offsets it counted, read and extended by every
// record of the user (velocity-style), so a record counted twice or lost
// shows in the list the next record of the user writes: after the restart
// the carried records are not processed again and the lists hold every
// record once.
func TestCrashAfterCheckpointWithSetLosesAndRepeatsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		var mu sync.Mutex
		written := map[string]string{}
		counting := func(name string) chain.Stage {
			inner := r.proc(true, nil)
			return chain.Stage{Name: name, Filter: typeFilter(name), Processor: chain.ProcessorFunc(
				func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
					key := name + "/" + string(e.Key)
					v, _, err := pc.State().Get([]byte(key))
					if err != nil {
						return chain.Fatal(err)
					}
					nv := string(v) + fmt.Sprintf("%d,", e.Offset)
					if err := pc.State().Set([]byte(key), []byte(nv), time.Time{}); err != nil {
						return chain.Fatal(err)
					}
					mu.Lock()
					written[key] = nv
					mu.Unlock()
					return inner.Process(ctx, pc, e)
				})}
		}
		stages := []chain.Stage{counting("click"), counting("install"), counting("purchase")}
		stages[1].Gate, stages[2].Gate = chain.GateKey, chain.GateKey
		tt := chaintest.New(t, stages, testDecoder, chain.WithStore(store.NewMemory()), chain.WithLateness(time.Hour),
			chain.WithIdleTimeout(time.Hour), chain.WithCommitInterval(time.Millisecond), chain.WithShutdownTimeout(time.Second))
		tt.Start(0)
		tt.Append(0, unreleasableRecs()...)
		synctest.Wait()
		time.Sleep(10 * time.Millisecond) // checkpoints at the commit interval (fake time)
		synctest.Wait()
		commits := tt.Commits(0)
		require.True(t, strings.HasPrefix(commits[len(commits)-1].Metadata, "dfl3:"), "a checkpoint carried a set")
		// The crash: click@6 is processed, never acknowledged.
		tt.SetAckMode(chaintest.AckHold)
		tt.Append(0, chaintest.Rec("u2", ev("click", 5001), base))
		synctest.Wait()
		require.ErrorIs(t, tt.Stop(), chain.ErrShutdownTimeout)
		tt.SetAckMode(chaintest.AckImmediately)

		tt.Start(0)
		tt.Append(0,
			chaintest.Rec("u2", ev("install", 1100), base), // 7: reads install/u2
			chaintest.Rec("u3", ev("purchase", 150), base), // 8: reads purchase/u3
			chaintest.Rec("u9", ev("click", 100000), base), // 9: makes everything known
		)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]string{
			"click/u1": "0,", "click/u2": "1,6,", "click/u9": "9,",
			"install/u1": "2,", "install/u2": "3,7,",
			"purchase/u3": "4,8,", "purchase/u1": "5,",
		}, written, "every record counted once at its stage")
		require.Equal(t, 1, r.callsOf("install")[3], "install@3 was carried: not processed again")
		require.Equal(t, 1, r.callsOf("purchase")[4], "purchase@4 was carried: not processed again")
	})
}

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
