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

type beginCounter struct {
	mu    sync.Mutex
	begun map[int64]int
}

func (b *beginCounter) Begin(i chain.BeginInfo) {
	b.mu.Lock()
	b.begun[i.Offset]++
	b.mu.Unlock()
}

func (b *beginCounter) Advanced(string, int32, int, int64, time.Time) {}

func (b *beginCounter) Committed(string, int32, int64, string) {}

// A record the gate let through but the full in-flight window refused
// before a stop was never begun: it must not be reported as begun (it is
// begun, once, after the restart).
func TestStopWithFullWindowReportsNoPhantomBegin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &beginCounter{begun: map[int64]int{}}
		emit := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			pc.Emit(chain.Message{Value: e.Value})
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "a", Processor: emit}}, testDecoder,
			chain.WithObserver(obs), chain.WithInFlight(2), chain.WithShutdownTimeout(time.Second))
		tt.SetAckMode(chaintest.AckHold)
		for range 5 {
			tt.Append(0, chaintest.Rec("k", ev("click", 1), base))
		}
		tt.Start(0)
		synctest.Wait() // offsets 0 and 1 in flight, 2 waits for a slot
		go func() { synctest.Wait(); tt.Release(nil) }()
		require.NoError(t, tt.Stop())
		tt.SetAckMode(chaintest.AckImmediately)
		tt.Start(0)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		for o := range int64(5) {
			require.Equal(t, 1, obs.begun[o], "offset %d begun once", o)
		}
	})
}
