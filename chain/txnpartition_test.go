package chain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// An exactly-once cycle does not pause the stages (DESIGN.md "Exactly-once
// mode"): it cuts each stage at its begin frontier, and while the cycle
// drains what is below the cut and commits, the stages go on beginning and
// processing the records above it, their sends deferred until the
// transaction ended. These tests block a cycle's Commit and check that the
// leader stage processes records at and above its cut meanwhile — with the
// former pause it processed none — and that, whatever the blocked commit's
// outcome (committed; failed and not committed: aborted and rewound;
// reported failed but committed: resolved), read_committed readers see
// every output and dead letter exactly once, each key's in offset order.
func TestExactlyOnceStagesRunPastTheCutWhileTheCycleCommits(t *testing.T) {
	for _, outcome := range []string{"committed", "aborted", "lost-result"} {
		for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("%s/%s/%d", outcome, scope, seed), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { testRunPastTheCut(t, outcome, scope, seed) })
				})
			}
		}
	}
}

func testRunPastTheCut(t *testing.T, outcome string, scope chain.GateScope, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 91))
	calls := new(callCounter)
	stages := resolveStages(scope, calls)
	// The leader notes the highest offset it processed while the commit
	// was blocked.
	var blocked atomic.Bool
	var maxWhileBlocked atomic.Int64
	maxWhileBlocked.Store(-1)
	// The first follower does too: its leader's records past the cut
	// completed (their sends deferred to the next transaction), so it may
	// run past that cut as well.
	var followerWhileBlocked atomic.Int64
	followerWhileBlocked.Store(-1)
	note := func(stage int, at *atomic.Int64) {
		inner := stages[stage].Processor
		stages[stage].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			if blocked.Load() {
				for {
					m := at.Load()
					if e.Offset <= m || at.CompareAndSwap(m, e.Offset) {
						break
					}
				}
			}
			return inner.Process(ctx, pc, e)
		})
	}
	note(0, &maxWhileBlocked)
	note(1, &followerWhileBlocked)
	tt, x, _ := exactlyOnceTester(t, stages, chain.WithCommitInterval(5*time.Millisecond), chain.WithShutdownTimeout(hotShutdown))
	if rng.IntN(2) == 0 {
		tt.SetAckMode(chaintest.AckAsync)
	}
	tt.Start(0)
	const n = 600
	recs := resolveRecords(0, n)
	first := 40 + rng.IntN(80)
	tt.Append(0, recs[:first]...)
	tt.WaitIdle()
	tt.WaitCommitted(0, int64(first))

	// Block the next Commit that holds offsets.
	var armed atomic.Bool
	armed.Store(true)
	entered := make(chan []chain.TxnOffset, 1)
	release := make(chan struct{})
	x.BeforeCommit(func() {
		offs := x.Attempted()
		// A cycle that moved nothing (the offset and metadata last
		// committed) holds nothing: a failed commit of it is resolved as
		// committed, not aborted, so the test blocks one that moves.
		if len(offs) == 0 || sameAsCommitted(tt.Commits(0), offs[0]) || !armed.CompareAndSwap(true, false) {
			return
		}
		switch outcome {
		case "aborted":
			x.FailCommits(1)
		case "lost-result":
			x.LoseCommitResults(1)
		}
		blocked.Store(true)
		entered <- offs
		<-release
		blocked.Store(false)
	})
	for i := first; i < n; {
		k := min(n-i, 1+rng.IntN(150))
		tt.Append(0, recs[i:i+k]...)
		i += k
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	offs := <-entered
	st, ok := commit.DecodeState(offs[0].Metadata, offs[0].Offset, []string{"click", "install", "purchase"})
	require.True(t, ok)
	cut := st.Stages[0].Next
	// The stages run while the commit is blocked.
	time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
	synctest.Wait()
	past, followerPast := maxWhileBlocked.Load(), followerWhileBlocked.Load()
	close(release)
	x.BeforeCommit(nil)
	// assert, not require: a failure must still stop the chain below, or
	// the synctest bubble never ends.
	assert.GreaterOrEqual(t, past, cut,
		"the leader processed records at or above its cut %d while the cycle's commit was blocked", cut)
	assert.GreaterOrEqual(t, followerPast, cut,
		"the follower processed records at or above its leader's cut %d while the cycle's commit was blocked", cut)

	tt.WaitIdle()
	tt.WaitCommitted(0, n)
	require.NoError(t, tt.Stop())
	_, aborts := x.Counts()
	res := x.Resolved()
	switch outcome {
	case "aborted":
		require.Equal(t, 1, aborts, "the failed cycle was aborted")
		require.Equal(t, chaintest.Resolutions{NotCommitted: 1}, res)
	case "lost-result":
		require.Zero(t, aborts)
		require.Equal(t, chaintest.Resolutions{Committed: 1}, res)
		require.Equal(t, validCount(recs), calls.total(), "nothing was processed twice: nothing was rewound")
	default:
		require.Zero(t, aborts)
		require.Equal(t, validCount(recs), calls.total(), "nothing was processed twice")
	}
	requireVisibleOnce(t, tt, outcome)
	requireKeyOrder(t, tt)
}

// requireKeyOrder checks that read_committed readers see each key's
// outputs of each stage, and each key's dead letters, in offset order.
func requireKeyOrder(t *testing.T, tt *chaintest.Tester) {
	t.Helper()
	last := map[string]int64{}
	for _, m := range tt.Outputs("output") {
		// "stage@offset key=n"
		id, _, _ := strings.Cut(string(m.Value), " ")
		stage, off, _ := strings.Cut(id, "@")
		o, err := strconv.ParseInt(off, 10, 64)
		require.NoError(t, err)
		k := stage + "/" + string(m.Key)
		if p, ok := last[k]; ok {
			require.Greater(t, o, p, "stage %s key %s: outputs in offset order", stage, m.Key)
		}
		last[k] = o
	}
	clear(last)
	for _, m := range tt.Outputs("dlq") {
		o, err := strconv.ParseInt(strings.TrimPrefix(string(m.Value), "bad-"), 10, 64)
		require.NoError(t, err)
		k := string(m.Key)
		if p, ok := last[k]; ok {
			require.Greater(t, o, p, "key %s: dead letters in offset order", m.Key)
		}
		last[k] = o
	}
}

// A stop (revoke, shutdown) while a cycle's Commit is blocked and the
// stages have records past the cut whose sends are deferred: those records
// have completed, their sends are flushed into the next transaction once
// the cycle committed, and that is the partition's final cycle, which
// waits for their acknowledgements and commits — no deadlock, nothing
// waits the shutdown timeout. The restart
// repeats nothing, and read_committed readers see every output and dead
// letter once, in per-key order. With a failed commit (aborted) instead,
// the deferred records are dropped with the aborted cycle and the stop
// ends with the abort (ErrTxnAborted); the restart processes them again.
func TestExactlyOnceStopWhileTheCycleCommitsWithDeferredSends(t *testing.T) {
	for _, outcome := range []string{"committed", "aborted"} {
		for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
			for seed := range uint64(2) {
				t.Run(fmt.Sprintf("%s/%s/%d", outcome, scope, seed), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { testStopWhileCommitting(t, outcome, scope, seed) })
				})
			}
		}
	}
}

func testStopWhileCommitting(t *testing.T, outcome string, scope chain.GateScope, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 17))
	tt, x, _ := exactlyOnceTester(t, resolveStages(scope, new(callCounter)),
		chain.WithCommitInterval(5*time.Millisecond), chain.WithShutdownTimeout(hotShutdown))
	if rng.IntN(2) == 0 {
		tt.SetAckMode(chaintest.AckAsync)
	}
	tt.Start(0)
	const n = 400
	recs := resolveRecords(0, n)
	first := 40 + rng.IntN(60)
	tt.Append(0, recs[:first]...)
	tt.WaitIdle()
	tt.WaitCommitted(0, int64(first))

	var armed atomic.Bool
	armed.Store(true)
	entered := make(chan struct{})
	release := make(chan struct{})
	x.BeforeCommit(func() {
		if len(x.Attempted()) == 0 || !armed.CompareAndSwap(true, false) {
			return
		}
		if outcome == "aborted" {
			x.FailCommits(1)
		}
		close(entered)
		<-release
	})
	tt.Append(0, recs[first:]...)
	<-entered
	time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
	pending := len(x.Pending())
	stopped := make(chan error, 1)
	go func() { stopped <- tt.Stop() }()
	time.Sleep(10 * time.Millisecond)
	synctest.Wait()
	select {
	case err := <-stopped:
		close(release)
		t.Fatalf("the stop returned (%v) while its cycle's commit was blocked", err)
	default:
	}
	close(release)
	x.BeforeCommit(nil)
	start := time.Now()
	err := <-stopped
	require.Less(t, time.Since(start), hotShutdown, "the stop did not wait the shutdown timeout")
	if outcome == "aborted" {
		require.ErrorIs(t, err, chain.ErrTxnAborted)
	} else {
		require.NoError(t, err)
	}
	t.Logf("%d outputs of the blocked transaction pending at the stop", pending)

	tt.Start(0)
	tt.WaitIdle()
	tt.WaitCommitted(0, n)
	require.NoError(t, tt.Stop())
	requireVisibleOnce(t, tt, outcome)
	requireKeyOrder(t, tt)
}

// An aborted cycle (EndTxn refused) drops the overlay and restarts the
// partition at its last committed positions: what the read_committed side
// sees is every output exactly once, with the values the model computes —
// a restart that kept the aborted cycle's writes would count those records
// twice, one at the wrong positions would lose or repeat outputs. Then the
// partition moves to an instance without local state, which restores it
// from the changelog's committed records only.
func TestExactlyOnceAbortRestartsFromCommittedPositionsWithOverlayDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := exactlyOnceTester(t, tally())
		tt.Start(0)
		var all []chain.Record
		feed := func(n int) {
			recs := tallyRecords(len(all), n)
			all = append(all, recs...)
			tt.Feed(0, recs...)
			tt.WaitCommitted(0, int64(len(all)))
		}
		feed(30)
		requireExactlyOnce(t, tt)
		_, aborts := x.Counts()
		require.Zero(t, aborts)

		// The next two transactions fail at commit: their outputs and
		// changelog records are never visible, and the partition restarts.
		x.FailCommits(2)
		feed(30)
		_, aborts = x.Counts()
		require.Equal(t, 2, aborts, "the failed commits aborted their cycles")
		requireExactlyOnce(t, tt)

		// The changelog holds the aborted cycles' records, which readers
		// skip: another instance restores the committed state from it.
		require.NoError(t, tt.Move("b", 0))
		feed(21)
		requireExactlyOnce(t, tt)
		require.NoError(t, tt.Stop())
	})
}

// A record still in flight when a cycle aborts (here: slower than the
// drain allows) must not put its outputs into the transaction that follows
// the abort: its partition restarts at the committed positions and
// processes it again, so those outputs would commit twice. (The fleet test
// found it: a member whose cycle timed out committed repeated installs and
// purchases.)
func TestExactlyOnceRecordInFlightAtAbortIsNotCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Past the cycle's drain (the shutdown timeout), within the
		// rewind's wait for it.
		stages := countSlowOnce(30, 150*time.Millisecond)
		tt, x, _ := exactlyOnceTester(t, stages, chain.WithShutdownTimeout(100*time.Millisecond))
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 60)...)
		tt.WaitCommitted(0, 60)
		require.NoError(t, tt.Stop())
		_, aborts := x.Counts()
		require.GreaterOrEqual(t, aborts, 1, "the slow record made a cycle abort")
		require.Equal(t, countModel(tt), sortedOutputs(tt))
	})
}

// A record that outlasts both the cycle's drain and the rewind's stop (it
// ignores its context past the shutdown timeout): the rewind cannot stop the
// epoch, so the partition fails — RunPartition returns the error instead of
// waiting, without stages and out of the cycles, for a stop nothing sends
// (the rewind's failure is not ignored as an abandoned record's) — and
// a restart from the last committed cycle still gives every output once.
func TestExactlyOnceRewindThatCannotStopFailsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Past the drain, the rewind's stop and its grace.
		stages := countSlowOnce(30, time.Second)
		tt, _, _ := exactlyOnceTester(t, stages, chain.WithShutdownTimeout(100*time.Millisecond))
		tt.Start(0)
		tt.Append(0, tallyRecords(0, 60)...)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Empty(t, tt.Stats(), "the partition ended by itself")
		err := tt.Stop()
		require.ErrorContains(t, err, "records in flight did not stop within the shutdown timeout")
		tt.Start(0)
		tt.WaitCommitted(0, 60)
		require.NoError(t, tt.Stop())
		require.Equal(t, countModel(tt), sortedOutputs(tt))
	})
}

// Cycles that fail at commit while the hot key's records wait in the key
// gates: each abort drops the overlay and restarts every stage at its
// committed positions with new key tables; read_committed readers still see
// every output exactly once, with the values the model computes from state
// (a rewind that kept the aborted cycle's writes would count twice). The
// partition then moves to an instance without local state, which restores
// the committed state from the changelog.
func TestExactlyOnceKeyGateAbortMidRunRewinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 600
		gated := 0
		tt, x, calls := hotRun(t, n, func(tt *chaintest.Tester, x *chaintest.Transactor, i int) {
			if i == 300 {
				for _, s := range tt.Stats()[0].Stages {
					gated += s.KeyGated
				}
				x.FailCommits(2)
			}
		})
		require.Positive(t, gated, "records waited in the key gates when the failures were injected")
		_, aborts := x.Counts()
		// (A failed cycle that had produced nothing — its records only
		// skipped — aborts no open transaction and is not counted.)
		require.True(t, aborts >= 1 && aborts <= 2, "the failed commits aborted their cycles, and nothing else did: %d aborts", aborts)
		require.Greater(t, calls.total(), int64(n), "the aborted cycles' records were processed again")
		require.Equal(t, hotModel(tt.Log(0).Records()), visible(tt), "every output exactly once")
		requireTxnPrefixes(t, tt, x, []string{"click", "install", "purchase"}, nil)

		require.NoError(t, tt.Move("b", 0))
		tt.Append(0, hotRecords(n, 200)...)
		tt.WaitIdle()
		tt.WaitCommitted(0, n+200)
		require.NoError(t, tt.Stop())
		require.Equal(t, hotModel(tt.Log(0).Records()), visible(tt), "every output exactly once after the move")
	})
}

// countSlowOnce is tally's first stage alone, whose processing of offset o
// takes d (fake time, ignoring its context) the first time.
func countSlowOnce(o int64, d time.Duration) []chain.Stage {
	stages := tally()[:1]
	inner := stages[0].Processor
	var slowed atomic.Bool
	stages[0].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		if e.Offset == o && slowed.CompareAndSwap(false, true) {
			time.Sleep(d)
		}
		return inner.Process(ctx, pc, e)
	})
	return stages
}

// sameAsCommitted reports whether o is the last of commits.
func sameAsCommitted(commits []chaintest.Commit, o chain.TxnOffset) bool {
	n := len(commits)
	return n > 0 && commits[n-1].Offset == o.Offset && commits[n-1].Metadata == o.Metadata
}
