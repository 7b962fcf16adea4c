package chain_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// eosTester is a tally chain in exactly-once mode with a changelog.
func eosTester(t *testing.T, stages []chain.Stage, opts ...chain.Option) (*chaintest.Tester, *chaintest.Transactor, *chaintest.Changelog) {
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

// An aborted cycle (EndTxn refused) drops the overlay and restarts the
// partition at its last committed positions: what the read_committed side
// sees is every output exactly once, with the values the model computes —
// a restart that kept the aborted cycle's writes would count those records
// twice, one at the wrong positions would lose or repeat outputs. Then the
// partition moves to an instance without local state, which restores it
// from the changelog's committed records only.
func TestExactlyOnceAbortRestartsFromCommittedPositionsWithOverlayDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := eosTester(t, tally())
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

// A send that fails inside the transaction (ErrTransaction) aborts the
// cycle and restarts the partition; no record fails, nothing is repeated or
// lost.
func TestExactlyOnceFailedSendAbortsTheCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := eosTester(t, tally())
		tt.Start(0)
		first := tallyRecords(0, 20)
		tt.Feed(0, first...)
		tt.WaitCommitted(0, 20)
		x.FailProduce(3)
		next := tallyRecords(20, 25)
		tt.Feed(0, next...)
		tt.WaitCommitted(0, 45)
		_, aborts := x.Counts()
		require.GreaterOrEqual(t, aborts, 1)
		requireExactlyOnce(t, tt)
		require.NoError(t, tt.Stop())
	})
}

// A clean stop (revoke) commits the partition's final checkpoint in a
// transaction before RunPartition returns; restarted, nothing repeats.
// Stops land mid-stream, at every point of the cycle.
func TestExactlyOnceStopCommitsFinalCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := eosTester(t, tally(), chain.WithCommitInterval(time.Hour))
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

// jittered is a key-parallel stage whose records take different times by
// offset (fake time), so they complete out of offset order; every record
// emits one output naming its offset.
func jittered(name, typ string, conc int) chain.Stage {
	return chain.Stage{Name: name, Filter: typeFilter(typ), KeyConcurrency: conc,
		Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			time.Sleep(time.Duration((e.Offset*7919)%13) * time.Millisecond)
			k := append([]byte(name+"/"), e.Key...)
			prev, _, err := pc.State().Get(k)
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(string(prev))
			if err := pc.State().Set(k, strconv.AppendInt(nil, int64(n+1), 10), time.Time{}); err != nil {
				return err
			}
			pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s@%d %s=%d", name, e.Offset, e.Key, n+1)})
			return nil
		})}
}

// With key-parallel stages, records complete out of offset order; a
// transaction must still hold exactly the outputs of a contiguous prefix
// per stage — those of the records between the previous commit's position
// and this one's, and no other. (Without the cycle's pause and drain, the
// outputs of records completed above a position would commit with an
// offset below them, and a restart would repeat them.)
func TestExactlyOnceTransactionsHoldContiguousPrefixes(t *testing.T) {
	testContiguousPrefixes(t, chain.GatePartition)
}

// The same with a key-scoped follower: its records wait in the key gate
// while a cycle pauses the stages, and the cycle's drain releases them.
func TestExactlyOnceKeyGateTransactionsHoldContiguousPrefixes(t *testing.T) {
	testContiguousPrefixes(t, chain.GateKey)
}

func testContiguousPrefixes(t *testing.T, scope chain.GateScope) {
	synctest.Test(t, func(t *testing.T) {
		stages := []chain.Stage{jittered("count", "click", 4), jittered("mark", "install", 3)}
		stages[1].Gate = scope
		tt, x, _ := eosTester(t, stages, chain.WithCommitInterval(5*time.Millisecond))
		tt.SetAckMode(chaintest.AckAsync)
		tt.Start(0)
		recs := tallyRecords(0, 400)
		for i := 0; i < len(recs); i += 40 {
			tt.Append(0, recs[i:i+40]...)
			time.Sleep(3 * time.Millisecond)
		}
		tt.WaitIdle()
		tt.WaitCommitted(0, 400)
		require.NoError(t, tt.Stop())

		txns, outputs := requireTxnPrefixes(t, tt, x, []string{"count", "mark"}, map[string]string{"click": "count", "install": "mark"})
		require.Greater(t, txns, 5, "several cycles ran while records were in flight")
		require.Equal(t, 400, outputs)
		_, aborts := x.Counts()
		require.Zero(t, aborts, "no cycle aborted: every drain finished")
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
				tt, x, _ := eosTester(t, tally()[:1], chain.WithCommitInterval(time.Hour), chain.WithTransactionLimits(lim.outputs, lim.writes))
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
		tt, x, _ := eosTester(t, stages, chain.WithShutdownTimeout(100*time.Millisecond))
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
		tt, _, _ := eosTester(t, stages, chain.WithShutdownTimeout(100*time.Millisecond))
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
