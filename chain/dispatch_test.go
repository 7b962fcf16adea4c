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

// TestDispatchRunsWorkThatDoesNotWaitOnOneWorker: a key-parallel stage of 8
// workers whose records do not wait, fed one record at a time (each done
// before the next arrives), runs every record on one worker, with and
// without the worker cap: a worker starts only when a key finds none idle.
func TestDispatchRunsWorkThatDoesNotWaitOnOneWorker(t *testing.T) {
	for _, opts := range map[string][]chain.Option{"no cap": nil, "cap 4": {chain.WithWorkerCap(4)}} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[*chain.Context]int{}
			p := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, _ *chain.Event) error {
				mu.Lock()
				seen[pc]++
				mu.Unlock()
				return nil
			})
			tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 8}}, testDecoder, opts...)
			tt.Start(0)
			for i, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
				tt.Append(0, chaintest.Rec(k, ev("click", i), base))
				synctest.Wait()
			}
			tt.WaitIdle()
			require.NoError(t, tt.Stop())
			require.Len(t, seen, 1, "one worker ran every record: %v", seen)
		})
	}
}

// TestDispatchSpreadsWorkThatWaits: 8 keys whose records wait 10 ms each,
// arriving at once, run on 8 workers at the same time, with and without
// the worker cap (of 8): reusing the last idle worker first never holds a
// key back while another worker is idle.
func TestDispatchSpreadsWorkThatWaits(t *testing.T) {
	for _, opts := range map[string][]chain.Option{"no cap": nil, "cap 8": {chain.WithWorkerCap(8)}} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			running, most := 0, 0
			seen := map[*chain.Context]bool{}
			p := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, _ *chain.Event) error {
				mu.Lock()
				running++
				most = max(most, running)
				seen[pc] = true
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 8}}, testDecoder, opts...)
			tt.Start(0)
			t0 := time.Now()
			for i, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
				tt.Append(0, chaintest.Rec(k, ev("click", i), base))
			}
			tt.WaitIdle()
			require.NoError(t, tt.Stop())
			require.Equal(t, 8, most, "all 8 keys in processing at once")
			require.Len(t, seen, 8, "on 8 workers")
			require.Equal(t, 10*time.Millisecond, time.Since(t0).Truncate(time.Millisecond), "one wait, not eight in turn")
		})
	}
}

// TestDispatchReusesTheLastIdleWorker: keys a and b run at once on two
// workers, b's longer; then c, d and e arrive one at a time and do not
// wait. They all run on b's worker, the one that went idle last, with and
// without the worker cap; the worker idle longest (a's) would be the one
// whose stack and context have left the cache.
func TestDispatchReusesTheLastIdleWorker(t *testing.T) {
	for _, opts := range map[string][]chain.Option{"no cap": nil, "cap 4": {chain.WithWorkerCap(4)}} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			ran := map[string]*chain.Context{}
			p := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
				switch string(e.Key) {
				case "a":
					time.Sleep(10 * time.Millisecond)
				case "b":
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				ran[string(e.Key)] = pc
				mu.Unlock()
				return nil
			})
			tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 8}}, testDecoder, opts...)
			tt.Start(0)
			tt.Append(0, chaintest.Rec("a", ev("click", 0), base), chaintest.Rec("b", ev("click", 1), base))
			tt.WaitIdle()
			for i, k := range []string{"c", "d", "e"} {
				tt.Append(0, chaintest.Rec(k, ev("click", 2+i), base))
				synctest.Wait()
			}
			tt.WaitIdle()
			require.NoError(t, tt.Stop())
			require.NotSame(t, ran["a"], ran["b"], "a and b ran at once, on two workers")
			for _, k := range []string{"c", "d", "e"} {
				require.Same(t, ran["b"], ran[k], "%s ran on the worker that went idle last", k)
			}
		})
	}
}
