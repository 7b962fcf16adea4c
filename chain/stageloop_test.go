package chain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestDirectStageKeepsWindowAndOutcomes: a stage that runs its records on
// its own goroutine begins a record in the tracker only after its
// processor's first attempt. Every outcome must still be what
// it was: a record retried, one with outputs held unacknowledged, one
// dead-lettered; the in-flight window still bounds what the stage runs
// (I9: with 4 slots and the record at 2 held, no record above 5 is run)
// and the position never passes a record whose outputs are not
// acknowledged (I3, I5).
func TestDirectStageKeepsWindowAndOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[int64]int{}
		proc := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, ev *chain.Event) error {
			mu.Lock()
			calls[ev.Offset]++
			n := calls[ev.Offset]
			mu.Unlock()
			switch ev.Offset % 5 {
			case 1: // fails once, then succeeds
				if n == 1 {
					return errors.New("transient")
				}
			case 2: // outputs, held until released
				pc.Emit(chain.Message{Key: ev.Key, Value: []byte("out")})
			case 3:
				return chain.Permanent(errors.New("bad"))
			}
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: proc}}, testDecoder,
			chain.WithInFlight(4), chain.WithRetry(2, time.Millisecond, time.Millisecond))
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(0)
		const n = 20
		for i := range n {
			tt.Append(0, chaintest.Rec("k", ev("click", i), base.Add(time.Duration(i)*time.Second)))
		}
		// Fake time (synctest): past offset 1's retry backoff, then until
		// every goroutine is blocked.
		time.Sleep(time.Second)
		synctest.Wait()

		mu.Lock()
		ran := map[int64]int{}
		for o, c := range calls {
			ran[o] = c
		}
		mu.Unlock()
		require.Equal(t, map[int64]int{0: 1, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1}, ran,
			"held at 2 with 4 slots: 2, 3, 4, 5 fill the window and nothing above runs")
		st := tt.Stats()[0].Stages[0]
		require.Equal(t, int64(2), st.Position, "the position stops at the unacknowledged record")

		// Release until everything is acknowledged (each release lets the
		// stage run up to the next held record).
		for range 10 {
			tt.Release(nil)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		tt.SetAckMode(chaintest.AckImmediately)
		tt.Release(nil)
		tt.WaitCommitted(0, n)

		st = tt.Stats()[0].Stages[0]
		require.Equal(t, int64(n), st.Position)
		require.Equal(t, 0, st.InFlight)
		require.Equal(t, int64(4), st.Retries, "offsets 1, 6, 11, 16 retried once")
		require.Equal(t, int64(4), st.DeadLettered, "offsets 3, 8, 13, 18")
		require.Equal(t, int64(n-4), st.Processed)
		mu.Lock()
		defer mu.Unlock()
		for o := range int64(n) {
			want := 1
			if o%5 == 1 {
				want = 2
			}
			require.Equal(t, want, calls[o], "offset %d", o)
		}
		require.NoError(t, tt.Stop())
		require.Len(t, tt.Outputs("dlq"), 4)
	})
}
