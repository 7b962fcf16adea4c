package chain_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestFirstStagePauseIsBounded: the first stage pauses for a buffered
// follower about to be evicted (DESIGN.md "Stage 0 pauses, briefly"), but
// never for longer than MaxPause: with its follower stuck in a processor,
// the first stage is held at first, then completes every record within
// the bound, and the follower, released, falls back to polling and
// processes every record exactly once.
func TestFirstStagePauseIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		stuck := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			if e.Offset == 0 {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		r := newRecorder()
		stages := []chain.Stage{
			{Name: "first", Processor: r.proc(false, nil)},
			{Name: "second", Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
				if err := stuck.Process(ctx, pc, e); err != nil {
					return err
				}
				return r.proc(false, nil).Process(ctx, pc, e)
			})},
		}
		// Buffer 64, batch 8: read-ahead 32, the pause starts 16 records
		// ahead of the follower.
		tt := chaintest.New(t, stages, testDecoder, chain.WithBufferSize(64), chain.WithBatchSize(8), chain.WithIdleTimeout(time.Millisecond))
		const n = 200
		recs := make([]chain.Record, n)
		for i := range recs {
			recs[i] = chaintest.Rec("k", ev("click", i), base)
		}
		tt.Append(0, recs...)
		tt.Start(0)
		synctest.Wait()
		require.Less(t, stagePos(tt, "first"), int64(n), "the first stage pauses for its follower, stuck at offset 0")

		time.Sleep(chain.MaxPause)
		synctest.Wait()
		require.Equal(t, int64(n), stagePos(tt, "first"), "after MaxPause the first stage gives up the pause and reads on")

		close(release)
		tt.WaitIdle()
		require.Positive(t, stageStats(tt, "second").Switches, "the follower fell out of the buffer and polled")
		ps := tt.Stats()[0]
		require.Equal(t, int64(1), ps.FirstStagePauses, "one pause for the stuck follower")
		require.Equal(t, int64(1), ps.PauseGiveUps, "which hit the bound")
		require.NoError(t, tt.Stop())
		for _, st := range []string{"first", "second"} {
			calls := r.callsOf(st)
			require.Len(t, calls, n, st)
			for o, c := range calls {
				require.Equal(t, 1, c, "%s: offset %d processed once", st, o)
			}
		}
	})
}

func stageStats(tt *chaintest.Tester, name string) chain.StageStats {
	for _, ps := range tt.Stats() {
		for _, s := range ps.Stages {
			if s.Name == name {
				return s
			}
		}
	}
	return chain.StageStats{}
}

func stagePos(tt *chaintest.Tester, name string) int64 { return stageStats(tt, name).Position }
