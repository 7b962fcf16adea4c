package chain_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

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
	tt, x, _ := eosTester(t, resolveStages(scope, calls),
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
				tt, x, _ := eosTester(t, resolveStages(scope, calls))
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
					tt, x, _ := eosTester(t, resolveStages(scope, new(callCounter)), chain.WithShutdownTimeout(shutdown))
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
		tt, x, _ := eosTester(t, resolveStages(chain.GateKey, new(callCounter)), chain.WithShutdownTimeout(shutdown))
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
