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
	"github.com/differential-dev/differential/commit"
)

// Exactly-once mode with the key-scoped gate (DESIGN.md "Exactly-once with
// the key-scoped gate"): a cycle pauses the stages while a key-scoped
// follower holds begun records waiting in its gate for its leader's
// progress on their keys; the drain must release them (their leader
// records were begun, so they finish), not wait for ever.

// hotKey is the key whose records the leader processes slowly.
const hotKey = "hot"

// hotStages is a three-stage chain — click → install → purchase, each
// following its leader with the key-scoped gate — whose processors keep a
// per-key count in state and emit "stage@offset key=count". The first
// stage (key-parallel, so other keys pass the hot one) takes slow for the
// hot key's records; calls counts every processing.
func hotStages(slow time.Duration, calls *callCounter) []chain.Stage {
	stage := func(name, typ string, conc int, cost func(e *chain.Event) time.Duration) chain.Stage {
		return chain.Stage{Name: name, Filter: typeFilter(typ), KeyConcurrency: conc, Gate: chain.GateKey,
			Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
				calls.add()
				if d := cost(e); d > 0 {
					time.Sleep(d)
				}
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
	stages := []chain.Stage{
		stage("click", "click", 4, func(e *chain.Event) time.Duration {
			if string(e.Key) == hotKey {
				return slow
			}
			return time.Duration(e.Offset%3) * time.Millisecond
		}),
		stage("install", "install", 2, func(e *chain.Event) time.Duration { return time.Duration(e.Offset%2) * time.Millisecond }),
		stage("purchase", "purchase", 1, func(*chain.Event) time.Duration { return 0 }),
	}
	stages[0].Gate = chain.GatePartition // the first stage has no leader
	return stages
}

// hotModel is what hotStages must output for a log, sorted.
func hotModel(recs []chain.Record) map[string]int {
	counts := map[string]int{}
	out := map[string]int{}
	for _, r := range recs {
		typ, _, _ := strings.Cut(string(r.Value), "|")
		k := typ + "/" + string(r.Key)
		counts[k]++
		out[fmt.Sprintf("%s@%d %s=%d", typ, r.Offset, r.Key, counts[k])]++
	}
	return out
}

// hotRecords returns n records from offset from: every fourth is the hot
// key's, the others spread over ten keys; each key goes click, install,
// purchase, click, … with event times in offset order.
func hotRecords(from, n int) []chain.Record {
	types := []string{"click", "install", "purchase"}
	recs := make([]chain.Record, n)
	for i := range recs {
		o := from + i
		key, idx := hotKey, o/4
		if o%4 != 0 {
			key, idx = fmt.Sprintf("u%d", o%10), o/10
		}
		recs[i] = chaintest.Rec(key, ev(types[idx%3], o), base)
	}
	return recs
}

// visible counts the outputs read_committed readers see.
func visible(tt *chaintest.Tester) map[string]int {
	out := map[string]int{}
	for _, m := range tt.Outputs("output") {
		out[string(m.Value)]++
	}
	return out
}

// callCounter counts processor calls, all stages together.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) add() { c.n.Add(1) }

func (c *callCounter) total() int64 { return c.n.Load() }

// requireTxnPrefixes checks every committed transaction of a chain whose
// outputs are "stage@offset …" (stageOf maps a record type to the stage
// that processes it; nil: the stage is named as the type): it holds exactly
// the outputs of the records between the previous commit's position and
// this one's, per stage, and every output is committed once. It returns
// how many transactions and outputs it checked.
func requireTxnPrefixes(t *testing.T, tt *chaintest.Tester, x *chaintest.Transactor, names []string, stageOf map[string]string) (txns, outputs int) {
	t.Helper()
	prev := map[string]int64{}
	seen := map[string]int{}
	all := x.Transactions()
	for i, txn := range all {
		if len(txn.Offsets) == 0 {
			continue
		}
		require.Len(t, txn.Offsets, 1)
		st, ok := commit.DecodeState(txn.Offsets[0].Metadata, txn.Offsets[0].Offset, names)
		require.True(t, ok)
		next := map[string]int64{}
		for _, cp := range st.Stages {
			next[cp.Stage] = cp.Next
		}
		want := map[string]bool{}
		for _, r := range tt.Log(0).Records() {
			stage, _, _ := strings.Cut(string(r.Value), "|")
			if stageOf != nil {
				stage = stageOf[stage]
			}
			if r.Offset >= prev[stage] && r.Offset < next[stage] {
				want[fmt.Sprintf("%s@%d", stage, r.Offset)] = true
			}
		}
		got := map[string]bool{}
		for _, m := range txn.Outputs {
			id, _, _ := strings.Cut(string(m.Value), " ")
			got[id] = true
			seen[id]++
		}
		require.Equal(t, want, got, "transaction %d holds exactly the outputs of [previous position, position) per stage", i)
		prev = next
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "output %s committed once", id)
	}
	return len(all), len(seen)
}

// hotShutdown is the shutdown timeout of the hot-key runs: a drain that
// waits it out aborts its cycle.
const hotShutdown = 10 * time.Second

// hotRun runs hotStages (the hot key 40 ms a record in the leader) in
// exactly-once mode over n records appended in chunks of 50, 4 ms apart
// (fake time), calling each(i) after the chunk at i, until every stage
// completed the log and the commit covers it.
func hotRun(t *testing.T, n int, each func(tt *chaintest.Tester, x *chaintest.Transactor, i int)) (*chaintest.Tester, *chaintest.Transactor, *callCounter) {
	t.Helper()
	calls := new(callCounter)
	tt, x, _ := eosTester(t, hotStages(40*time.Millisecond, calls),
		chain.WithCommitInterval(5*time.Millisecond), chain.WithShutdownTimeout(hotShutdown))
	tt.SetAckMode(chaintest.AckAsync)
	tt.Start(0)
	recs := hotRecords(0, n)
	for i := 0; i < n; i += 50 {
		tt.Append(0, recs[i:i+50]...)
		time.Sleep(4 * time.Millisecond)
		if each != nil {
			each(tt, x, i)
		}
	}
	tt.WaitIdle()
	tt.WaitCommitted(0, int64(n))
	return tt, x, calls
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

// A stop (revoke, shutdown) while records wait in the key gates, with
// cycles pausing the stages all along: the final cycle commits what the
// drain completed, and the restart repeats nothing.
func TestExactlyOnceKeyGateCleanStopRepeatsNothing(t *testing.T) { testKeyGateCleanStop(t, true) }

// I1 per key at every record begun, in exactly-once mode with cycles that
// fail at commit and rewind the partition (see testI1PerKey).
func TestI1PerKeyRandomizedExactlyOnce(t *testing.T) { testI1PerKey(t, true) }

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
