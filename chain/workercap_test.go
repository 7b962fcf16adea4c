package chain_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestWorkerCapHotKeyKeepsItsSlot: a chain-wide worker cap of 1 over a
// key-parallel stage (4 workers). The hot key's first record runs; its
// next four queue behind it, and three other keys' records wait for the
// slot. The hot key's worker keeps the slot while its key has records
// ready: its five records run back to back, then the other keys, one at a
// time. Without the cap the other keys would run at once beside the hot
// key; with a slot taken per record the hot key's second record would
// queue behind them.
func TestWorkerCapHotKeyKeepsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cost = 10 * time.Millisecond
		var mu sync.Mutex
		running, most := 0, 0
		type run struct {
			key        string
			start, end time.Duration
		}
		var runs []run
		t0 := time.Now()
		p := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			mu.Lock()
			running++
			most = max(most, running)
			start := time.Since(t0)
			mu.Unlock()
			time.Sleep(cost)
			mu.Lock()
			running--
			runs = append(runs, run{string(e.Key), start, time.Since(t0)})
			mu.Unlock()
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 4}}, testDecoder,
			chain.WithWorkerCap(1))
		tt.Start(0)
		tt.Append(0, chaintest.Rec("hot", ev("click", 0), base))
		synctest.Wait() // hot@0 runs and holds the slot
		for i, k := range []string{"hot", "a", "hot", "b", "hot", "c", "hot"} {
			tt.Append(0, chaintest.Rec(k, ev("click", i+1), base))
		}
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Equal(t, 1, most, "at most the cap's records in processing at once")
		require.Len(t, runs, 8)
		for i := range 5 {
			require.Equal(t, "hot", runs[i].key, "the hot key's records run back to back: %v", runs)
			require.Equal(t, time.Duration(i)*cost, runs[i].start, "no wait between two of the hot key's records: %v", runs)
		}
	})
}

// TestWorkerCapLongestBacklogFirst: cap 1, key x running with one more
// record queued. Then three records of "hot" and one of "a" arrive and
// wait for the slot. When x's record ends, its key has 1 record ready and
// hot 3: x hands the slot to hot, whose records run back to back; then a
// (it waited first) and x's second record. A first-come slot (or one kept
// through the key's queue) would run x's second record or a before hot.
func TestWorkerCapLongestBacklogFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []string
		p := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			order = append(order, string(e.Key))
			mu.Unlock()
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 4}}, testDecoder,
			chain.WithWorkerCap(1))
		tt.Start(0)
		tt.Append(0, chaintest.Rec("x", ev("click", 0), base), chaintest.Rec("x", ev("click", 1), base))
		synctest.Wait() // x@0 runs, x@1 queued behind it
		tt.Append(0, chaintest.Rec("a", ev("click", 2), base))
		synctest.Wait() // a waits for the slot
		for i := range 3 {
			tt.Append(0, chaintest.Rec("hot", ev("click", 3+i), base))
		}
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Equal(t, []string{"x", "hot", "hot", "hot", "a", "x"}, order)
	})
}

// TestWorkerCapStageKeepsReading: cap 1, two workers. hot@0 runs; a, b
// and c arrive, then two more records of hot. The second worker takes a
// and waits for the slot; under the cap the stage does not wait for a free
// worker, so b and c wait for one and hot's records queue behind hot@0:
// when it ends, hot has more ready than a and keeps the slot. A stage that
// waited for a worker would not have read hot's records yet: hot's queue
// would run dry and a would go first.
func TestWorkerCapStageKeepsReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []string
		p := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			order = append(order, string(e.Key))
			mu.Unlock()
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 2}}, testDecoder,
			chain.WithWorkerCap(1))
		tt.Start(0)
		tt.Append(0, chaintest.Rec("hot", ev("click", 0), base))
		synctest.Wait()
		for i, k := range []string{"a", "b", "c", "hot", "hot"} {
			tt.Append(0, chaintest.Rec(k, ev("click", 1+i), base))
		}
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Equal(t, []string{"hot", "hot", "hot", "a", "b", "c"}, order)
	})
}

// TestWorkerCapAcrossPartitionsAndStages: the cap holds across every
// partition and key-parallel stage of one chain, and every record is
// processed once per stage.
func TestWorkerCapAcrossPartitionsAndStages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running, most := 0, 0
		calls := map[[3]int64]int{}
		proc := func(stage int64) chain.Processor {
			return chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
				mu.Lock()
				running++
				most = max(most, running)
				calls[[3]int64{stage, int64(e.Partition), e.Offset}]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
		}
		stages := []chain.Stage{
			{Name: "lead", Processor: proc(0), KeyConcurrency: 8},
			{Name: "follow", Processor: proc(1), KeyConcurrency: 8, Gate: chain.GateKey},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithWorkerCap(3))
		const parts, n = 3, 60
		tt.Start(0, 1, 2)
		for p := range int32(parts) {
			for i := range n {
				tt.Append(p, chaintest.Rec(string(rune('a'+i%7)), ev("click", i), base))
			}
		}
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Equal(t, 3, most, "the cap is shared by every partition and stage, and used")
		require.Len(t, calls, 2*parts*n)
		for k, c := range calls {
			require.Equal(t, 1, c, "stage %d partition %d offset %d", k[0], k[1], k[2])
		}
	})
}

func TestWorkerCapMustNotBeNegative(t *testing.T) {
	_, err := chain.New([]chain.Stage{{Name: "only", Processor: chain.ProcessorFunc(nil)}}, testDecoder, chain.WithWorkerCap(-1))
	require.ErrorContains(t, err, "worker cap must be >= 0")
}
