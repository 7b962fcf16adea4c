package chain_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// TestWindowWiderThanTheSpanWaitsInsteadOfFailing: with an in-flight
// window wider than the span a checkpoint can carry (commit.MaxAboveSpan),
// a stage that runs records on its own goroutine must wait, not fail, when
// a record far ahead of an incomplete one would leave the span. Here the
// last stage's record 0 waits for its output's acknowledgement while the
// records after it complete at once; a direct path that began offset
// 0+span+1 in the tracker would be refused (commit.ErrWindowFull), and the
// partition would fail with "tracker window full" (under load, where an
// acknowledgement comes late).
func TestWindowWiderThanTheSpanWaitsInsteadOfFailing(t *testing.T) {
	span := commit.MaxAboveSpan(3)
	require.Positive(t, span)
	n := span + 100
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[string]map[int64]int{}
		proc := func(name string, emit bool) chain.Processor {
			return chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
				mu.Lock()
				if calls[name] == nil {
					calls[name] = map[int64]int{}
				}
				calls[name][ev.Offset]++
				mu.Unlock()
				if emit && ev.Offset == 0 {
					pc.Emit(chain.Message{Value: []byte("out@0")})
				}
				return nil
			})
		}
		stages := []chain.Stage{
			{Name: "a", Processor: proc("a", false)},
			{Name: "b", Processor: proc("b", false)},
			{Name: "c", Processor: proc("c", true)},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithInFlight(2*n))
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(0)
		recs := make([]chain.Record, n)
		for i := range recs {
			recs[i] = chaintest.Rec(fmt.Sprintf("u%d", i%7), ev("click", i), base)
		}
		tt.Append(0, recs...)
		synctest.Wait()
		tt.Release(nil)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		for _, name := range []string{"a", "b", "c"} {
			require.Len(t, calls[name], n, "stage %s processed every record", name)
			for o, c := range calls[name] {
				require.Equal(t, 1, c, "stage %s, offset %d", name, o)
			}
		}
		commits := tt.Commits(0)
		require.Equal(t, int64(n), commits[len(commits)-1].Offset)
	})
}
