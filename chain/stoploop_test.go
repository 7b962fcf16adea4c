package chain_test

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestStartStopLoopThenWaitIdle stops and restarts a key-parallel chain 50
// times mid-run (asynchronous acks, a buffer of 8, 1 ms commits), then
// runs it to the end. Every restart resumes each stage at its own position,
// often the first stage more than a buffer ahead of the last; the chain
// must still finish (regression: the handoff buffer's writer waited for a
// pacer that had already read past it, and the partition stalled for ever;
// under synctest that is a deadlock) and process every record exactly once
// per stage.
func TestStartStopLoopThenWaitIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		cost := func(o int64) time.Duration { return time.Duration(o%5) * 50 * time.Microsecond }
		tt := chaintest.New(t, threeStages(r, true, 4, cost), testDecoder,
			chain.WithBufferSize(8), chain.WithBatchSize(2), chain.WithCommitInterval(time.Millisecond))
		tt.SetAckMode(chaintest.AckAsync)
		recs := workload(rand.New(rand.NewPCG(1, 1)), 3000, 7, 0)
		tt.Append(0, recs...)
		for range 50 {
			tt.Start(0)
			time.Sleep(time.Millisecond) // fake time: stop mid-run
			require.NoError(t, tt.Stop())
		}
		tt.Start(0)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		commits := tt.Commits(0)
		require.Equal(t, int64(len(recs)), commits[len(commits)-1].Offset)
		n := 0
		for _, st := range []string{"click", "install", "purchase"} {
			for o, c := range r.calls[st] {
				require.Equal(t, 1, c, "stage %s offset %d processed %d times", st, o, c)
			}
			n += len(r.calls[st])
		}
		require.Equal(t, len(recs), n)
	})
}
