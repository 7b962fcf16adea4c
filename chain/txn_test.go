package chain_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// exactlyOnceTester is a tally chain in exactly-once mode with a changelog.
func exactlyOnceTester(t *testing.T, stages []chain.Stage, opts ...chain.Option) (*chaintest.Tester, *chaintest.Transactor, *chaintest.Changelog) {
	opts = append([]chain.Option{chain.WithIdleTimeout(time.Millisecond), chain.WithCommitInterval(10 * time.Millisecond)}, opts...)
	tt := chaintest.New(t, stages, testDecoder, opts...)
	cl := tt.UseChangelog()
	x := tt.UseTransactions()
	return tt, x, cl
}

// requireExactlyOnce checks the visible outputs against the model of the
// whole log: each exactly once, the right values (a value computed from
// state that an aborted cycle had changed would differ), nothing else.
func requireExactlyOnce(t *testing.T, tt *chaintest.Tester) {
	t.Helper()
	require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt))
}

// A clean stop (revoke) commits the partition's final checkpoint in a
// transaction before RunPartition returns; restarted, nothing repeats.
// Stops land mid-stream, at every point of the cycle.
func TestExactlyOnceStopCommitsFinalCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := exactlyOnceTester(t, tally(), chain.WithCommitInterval(time.Hour))
		var all []chain.Record
		for round := range 5 {
			tt.Start(0)
			recs := tallyRecords(len(all), 17+round)
			all = append(all, recs...)
			tt.Feed(0, recs...)
			require.NoError(t, tt.Stop())
			cs := tt.Commits(0)
			require.Equal(t, int64(len(all)), cs[len(cs)-1].Offset, "round %d: the stop committed everything", round)
			requireExactlyOnce(t, tt)
		}
		commits, aborts := x.Counts()
		require.Equal(t, 5, commits, "one transaction per stop (the interval never elapses)")
		require.Zero(t, aborts)
	})
}

// A cycle commits early, long before the commit interval, once its open
// transaction holds more outputs or state writes than WithTransactionLimits
// allows: the overlay and the open outputs stay bounded. (Without the
// limits nothing commits before the hour-long interval.)
func TestExactlyOnceCycleCommitsEarlyAtTheLimits(t *testing.T) {
	for _, lim := range []struct {
		name            string
		outputs, writes int
	}{{"outputs", 10, 1 << 20}, {"writes", 1 << 20, 10}} {
		t.Run(lim.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// One stage: no gate holds records back between cycles.
				tt, x, _ := exactlyOnceTester(t, tally()[:1], chain.WithCommitInterval(time.Hour), chain.WithTransactionLimits(lim.outputs, lim.writes))
				start := time.Now()
				tt.Start(0)
				// Each chunk passes the limits: a cycle commits part of it at
				// once (the rest, below the limits, waits for the next).
				for i := range 5 {
					tt.Append(0, tallyRecords(20*i, 20)...)
					tt.WaitCommitted(0, int64(20*i+1))
				}
				require.Less(t, time.Since(start), time.Hour, "committed before the interval ended")
				txns := x.Transactions()
				require.GreaterOrEqual(t, len(txns), 5, "one early cycle per chunk at least")
				// The last chunk's tail (below the limits) is committed by the
				// stop, but only what was processed: let the stage finish it
				// first (a stop begins nothing new; under -race the stage
				// could still be behind).
				synctest.Wait()
				require.NoError(t, tt.Stop())
				require.Equal(t, countModel(tt), sortedOutputs(tt))
			})
		})
	}
}

// countModel is the model's outputs of tally's first stage ("count") for
// the tester's log, for chains that run that stage alone.
func countModel(tt *chaintest.Tester) []string {
	var want []string
	for _, o := range sortedModel(tt.Log(0).Records()) {
		if strings.HasPrefix(o, "count@") {
			want = append(want, o)
		}
	}
	return want
}

// A failed Commit is not always an aborted transaction: EndTxn can fail
// after the transaction coordinator wrote its commit decision (the
// connection lost on the response), and the transaction commits all the
// same. These tests check that the chain learns the outcome
// (chain.CommitResolver) before it rewinds anything (DESIGN.md
// "Exactly-once mode").

// resolveRecords is hotRecords with every 23rd record invalid (it cannot be
// decoded, so the first stage dead-letters it), from offset from.
func resolveRecords(from, n int) []chain.Record {
	recs := hotRecords(from, n)
	for i := range recs {
		if (from+i)%23 == 11 {
			recs[i].Value = fmt.Appendf(nil, "bad-%d", from+i)
		}
	}
	return recs
}

// deadLetterModel is what the dead-letter topic must hold for recs: each
// invalid record's value once.
func deadLetterModel(recs []chain.Record) map[string]int {
	want := map[string]int{}
	for _, r := range recs {
		if _, err := testDecoder.Decode(&r); err != nil {
			want[string(r.Value)]++
		}
	}
	return want
}

// visibleDeadLetters counts the dead letters read_committed readers see.
func visibleDeadLetters(tt *chaintest.Tester) map[string]int {
	out := map[string]int{}
	for _, m := range tt.Outputs("dlq") {
		out[string(m.Value)]++
	}
	return out
}

// validCount is how many of recs can be decoded (each is processed by
// exactly one stage of hotStages).
func validCount(recs []chain.Record) int64 {
	n := int64(0)
	for _, r := range recs {
		if _, err := testDecoder.Decode(&r); err == nil {
			n++
		}
	}
	return n
}

// requireVisibleOnce checks what read_committed readers see against the
// model of the whole log: every output and every dead letter exactly once.
func requireVisibleOnce(t *testing.T, tt *chaintest.Tester, what string) {
	t.Helper()
	recs := tt.Log(0).Records()
	var valid []chain.Record
	for _, r := range recs {
		if _, err := testDecoder.Decode(&r); err == nil {
			valid = append(valid, r)
		}
	}
	require.Equal(t, hotModel(valid), visible(tt), "%s: every output exactly once", what)
	require.Equal(t, deadLetterModel(recs), visibleDeadLetters(tt), "%s: every dead letter exactly once", what)
}

// resolveStages is hotStages (the hot key 3 ms a record in the leader) with
// the followers' gate scope set.
func resolveStages(scope chain.GateScope, calls *callCounter) []chain.Stage {
	stages := hotStages(3*time.Millisecond, calls)
	stages[1].Gate, stages[2].Gate = scope, scope
	return stages
}

// Cycles whose Commit fails after the transaction committed (random ones,
// both gate scopes, outputs and dead letters): the chain asks the
// Transactor, learns that the transaction committed and goes on as after a
// successful commit — no cycle is aborted, no record is processed twice,
// and read_committed readers see every output and dead letter exactly once.
// The state the lost cycles wrote is committed too: the partition restarts
// on the same instance (local state) and then moves to one without state
// (restored from the changelog), and the outputs computed from state after
// each restart are still the model's. (Without the resolution each such
// cycle was aborted and rewound, and its committed outputs written again.)
func TestExactlyOnceLostCommitResultIsCommitted(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("%s/%d", scope, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { testLostCommitResults(t, scope, seed) })
			})
		}
	}
}

func testLostCommitResults(t *testing.T, scope chain.GateScope, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 47))
	calls := new(callCounter)
	tt, x, _ := exactlyOnceTester(t, resolveStages(scope, calls),
		chain.WithCommitInterval(5*time.Millisecond), chain.WithShutdownTimeout(hotShutdown))
	if rng.IntN(2) == 0 {
		tt.SetAckMode(chaintest.AckAsync)
	}
	tt.Start(0)
	const n = 600
	recs := resolveRecords(0, n)
	lost := 0
	for i := 0; i < n; {
		k := min(n-i, 1+rng.IntN(80))
		tt.Append(0, recs[i:i+k]...)
		i += k
		if rng.IntN(3) == 0 {
			m := 1 + rng.IntN(2)
			x.LoseCommitResults(m)
			lost += m
		}
		time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
	tt.WaitIdle()
	tt.WaitCommitted(0, n)
	require.NoError(t, tt.Stop())
	res := x.Resolved()
	_, aborts := x.Counts()
	t.Logf("%d lost commit results injected, %d resolved as committed", lost, res.Committed)
	requireVisibleOnce(t, tt, "after the lost results")
	require.Equal(t, validCount(recs), calls.total(), "no record was processed twice: nothing was rewound")
	require.Zero(t, aborts, "no cycle was aborted")
	require.Positive(t, res.Committed, "some commits were reported failed after they committed")
	require.Zero(t, res.NotCommitted+res.Unknown, "every failed commit had committed")

	// The same instance resumes from its local state (persisted after the
	// lost results as after any commit), then another instance restores
	// the partition from the changelog; both see the lost cycles' state.
	for _, instance := range []string{"a", "b"} {
		x.LoseCommitResults(1)
		tt.StartOn(instance, 0)
		total := len(tt.Log(0).Records())
		tt.Append(0, resolveRecords(total, 100)...)
		tt.WaitIdle()
		tt.WaitCommitted(0, int64(total+100))
		require.NoError(t, tt.Stop())
		cs := tt.Commits(0)
		require.Equal(t, int64(total+100), cs[len(cs)-1].Offset, "instance %s: the commit covers the log", instance)
		requireVisibleOnce(t, tt, "instance "+instance)
	}
}

// A failed Commit that did not commit (EndTxn refused): the chain asks the
// Transactor, learns that the transaction did not commit, and aborts and
// rewinds the cycle as before — its records are processed again, and every
// output and dead letter is visible once.
func TestExactlyOnceFailedCommitNotCommittedRewinds(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls := new(callCounter)
				tt, x, _ := exactlyOnceTester(t, resolveStages(scope, calls))
				tt.Start(0)
				tt.Feed(0, resolveRecords(0, 60)...)
				tt.WaitCommitted(0, 60)
				x.FailCommits(1)
				tt.Feed(0, resolveRecords(60, 60)...)
				tt.WaitCommitted(0, 120)
				require.NoError(t, tt.Stop())
				require.Equal(t, chaintest.Resolutions{NotCommitted: 1}, x.Resolved())
				_, aborts := x.Counts()
				require.Equal(t, 1, aborts, "the failed cycle was aborted")
				require.Greater(t, calls.total(), validCount(tt.Log(0).Records()), "the aborted cycle's records were processed again")
				requireVisibleOnce(t, tt, "after the rewind")
			})
		})
	}
}

// A failed Commit whose outcome the Transactor cannot learn (its read of
// the committed offsets keeps failing until the cycle's timeout): the chain
// neither rewinds the partition (which would repeat the cycle if it
// committed) nor goes on (which would lose it if it did not). The partition
// fails with ErrTxnOutcomeUnknown, committing nothing more, and its restart
// resumes from the committed offsets and the changelog: every output and
// dead letter is visible once, whichever way the transaction ended.
func TestExactlyOnceUnknownCommitOutcomeFailsThePartition(t *testing.T) {
	for _, committed := range []bool{true, false} {
		for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
			t.Run(fmt.Sprintf("committed=%v/%s", committed, scope), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const shutdown = time.Second
					tt, x, _ := exactlyOnceTester(t, resolveStages(scope, new(callCounter)), chain.WithShutdownTimeout(shutdown))
					tt.Start(0)
					tt.Feed(0, resolveRecords(0, 60)...)
					tt.WaitCommitted(0, 60)
					before := len(tt.Commits(0))
					if committed {
						x.LoseCommitResults(1)
					} else {
						x.FailCommits(1)
					}
					x.FailResolve(1)
					tt.Append(0, resolveRecords(60, 60)...)
					// The resolution waits out its timeout, then the
					// partition fails and ends.
					time.Sleep(3 * shutdown)
					synctest.Wait()
					require.Empty(t, tt.Stats(), "the partition failed and ended")
					require.ErrorIs(t, tt.Stop(), chain.ErrTxnOutcomeUnknown)
					require.Equal(t, chaintest.Resolutions{Unknown: 1}, x.Resolved())
					cs := tt.Commits(0)
					if committed {
						require.Len(t, cs, before+1, "the lost cycle committed, and nothing after it")
					} else {
						require.Len(t, cs, before, "nothing committed after the failed cycle")
					}

					// The restart (the same instance: its local state is
					// the previous cycle's) resumes at the committed
					// offset, with the state caught up from the changelog
					// when the transaction committed.
					tt.Start(0)
					tt.Append(0, resolveRecords(120, 60)...)
					tt.WaitIdle()
					tt.WaitCommitted(0, 180)
					require.NoError(t, tt.Stop())
					requireVisibleOnce(t, tt, "after the restart")
				})
			})
		}
	}
}

// The unknown outcome fails only the partitions whose offsets the
// transaction held: a partition with nothing new in the cycle is at its
// committed positions whichever way the transaction ended, and goes on —
// it keeps processing and committing while the other has failed. After
// the restart, read_committed readers see every output and dead letter of
// both partitions once.
func TestExactlyOnceUnknownCommitOutcomeSparesUnchangedPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shutdown = time.Second
		tt, x, _ := exactlyOnceTester(t, resolveStages(chain.GateKey, new(callCounter)), chain.WithShutdownTimeout(shutdown))
		tt.Start(0, 1)
		for p := range int32(2) {
			tt.Feed(p, resolveRecords(0, 60)...)
			tt.WaitCommitted(p, 60)
		}
		x.LoseCommitResults(1)
		x.FailResolve(1)
		tt.Append(0, resolveRecords(60, 60)...)
		time.Sleep(3 * shutdown)
		synctest.Wait()
		st := tt.Stats()
		require.Len(t, st, 1, "one partition failed and ended")
		require.Equal(t, int32(1), st[0].Partition, "the partition the transaction committed offsets for failed; the other runs")
		// (WaitCommitted fails the test once a partition failed.)
		tt.Append(1, resolveRecords(60, 40)...)
		time.Sleep(time.Second)
		synctest.Wait()
		cs := tt.Commits(1)
		require.Equal(t, int64(100), cs[len(cs)-1].Offset, "the other partition went on committing")
		require.ErrorIs(t, tt.Stop(), chain.ErrTxnOutcomeUnknown)

		tt.Start(0, 1)
		tt.Append(0, resolveRecords(120, 30)...)
		tt.WaitIdle()
		tt.WaitCommitted(0, 150)
		require.NoError(t, tt.Stop())
		want, dead := map[string]int{}, map[string]int{}
		for p := range int32(2) {
			var valid []chain.Record
			for _, r := range tt.Log(p).Records() {
				if _, err := testDecoder.Decode(&r); err == nil {
					valid = append(valid, r)
				}
			}
			for k, n := range hotModel(valid) {
				want[k] += n
			}
			for k, n := range deadLetterModel(tt.Log(p).Records()) {
				dead[k] += n
			}
		}
		require.Equal(t, want, visible(tt), "every output of both partitions exactly once")
		require.Equal(t, dead, visibleDeadLetters(tt), "every dead letter of both partitions exactly once")
	})
}

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
