package chain_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// A send that fails inside the transaction (ErrTransaction) aborts the
// cycle and restarts the partition; no record fails, nothing is repeated or
// lost.
func TestExactlyOnceFailedSendAbortsTheCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt, x, _ := exactlyOnceTester(t, tally())
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
		tt, x, _ := exactlyOnceTester(t, stages, chain.WithCommitInterval(5*time.Millisecond))
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

// A hot key that is slow in the leader, while the other keys flow: its
// followers' records wait in the key gate across many cycles. Every cycle
// commits (none waits the shutdown timeout and aborts), the transactions
// hold contiguous prefixes per stage, and read_committed readers see every
// output of the model exactly once. (A cycle waits for the records begun
// before its cut, the key-waiting ones included: had they been held, the
// drain would wait the whole shutdown timeout and the cycle abort.) The
// stages do not pause during a cycle, so the leader begins the hot key's
// backlog while the first cycles drain, and the next cycle's cut holds all
// of it: here about three cycles commit (the first, the one after the
// backlog, the final one) where the former pause committed about eleven
// smaller ones; none takes as long as the shutdown timeout.
func TestExactlyOnceKeyGateHotKeyCyclesCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		const n = 600
		tt, x, calls := hotRun(t, n, nil)
		require.NoError(t, tt.Stop())
		commits, aborts := x.Counts()
		t.Logf("%d commits in %v", commits, time.Since(start))
		require.Zero(t, aborts, "no cycle aborted: every drain released the key-waiting records")
		// Two at least: a record released at the tail waits for its key's
		// leader records up to the tail (it reads the state as of there),
		// so the hot key's backlog can end in the final cycle.
		require.GreaterOrEqual(t, commits, 2, "cycles kept committing while the hot key was slow")
		require.Less(t, time.Since(start), hotShutdown, "no cycle waited the shutdown timeout")
		require.Equal(t, hotModel(tt.Log(0).Records()), visible(tt), "every output exactly once")
		requireTxnPrefixes(t, tt, x, []string{"click", "install", "purchase"}, nil)
		require.Equal(t, int64(n), calls.total(), "no record processed twice")
	})
}

// A send that fails inside the transaction (ErrTransaction) drops its
// record without failing the partition: the cycle aborts and rewinds. When
// the record is the leader's and followers' records of its key wait in the
// key gate for it, they can never be released in this epoch: they are
// dropped too (the epoch is rewound anyway), so neither the cycle's drain
// nor the rewind's stop waits out the shutdown timeout — which, on a real
// broker where a fenced producer's sends hang, made every partition fail
// its rewind (kafka.TestFencedTransactorRecovers).
func TestExactlyOnceKeyGateFailedLeaderSendDropsItsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tt, x, _ := hotRun(t, 600, func(_ *chaintest.Tester, x *chaintest.Transactor, i int) {
			if i == 200 {
				// The hot key's next click: its install and purchase wait
				// for it in the key gates.
				x.FailProduceWhere(1, func(m chain.Message) bool {
					return string(m.Key) == hotKey && strings.HasPrefix(string(m.Value), "click@")
				})
			}
		})
		require.NoError(t, tt.Stop())
		_, aborts := x.Counts()
		require.Positive(t, aborts, "the failed send aborted its cycle")
		require.Less(t, time.Since(start), hotShutdown, "no drain waited out the shutdown timeout")
		require.Equal(t, hotModel(tt.Log(0).Records()), visible(tt), "every output exactly once")
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
