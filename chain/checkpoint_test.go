package chain_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// TestCheckpointsArePairsThatExisted is a stress test of the commit path
// (I4): in real time and with real parallelism (key-parallel
// stages, acknowledgements on other goroutines, a commit as often as the
// loop can), every committed checkpoint must be a (position, watermark)
// pair that existed — the watermark is exactly S(position), the stream time
// below the position — and no follower's stored position may exceed its
// leader's. A torn read (position of one instant, watermark of another)
// would make a restored stage drop or admit records wrongly.
func TestCheckpointsArePairsThatExisted(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 11))
		recs := workload(rng, 20_000, 13, 50)
		// S[o] = the largest valid event time below o (unix ns, 0 = none).
		S := make([]int64, len(recs)+1)
		for i := range recs {
			S[i+1] = S[i]
			if d, err := testDecoder.Decode(&recs[i]); err == nil {
				S[i+1] = max(S[i], d.Time.UnixNano())
			}
		}
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, true, []int{0, 4, 16}[seed], nil), testDecoder,
			chain.WithCommitInterval(time.Microsecond), chain.WithBufferSize(256), chain.WithBatchSize(16))
		tt.SetAckMode(chaintest.AckAsync)
		tt.Start(0)
		tt.Feed(0, recs...)
		require.NoError(t, tt.Stop())
		commits := tt.Commits(0)
		require.Greater(t, len(commits), 100, "the stress needs many commits")
		names := []string{"click", "install", "purchase"}
		for _, c := range commits {
			cps, ok := commit.DecodeMetadata(c.Metadata, c.Offset, names)
			require.True(t, ok)
			for i, cp := range cps {
				require.Equal(t, S[cp.Next], cp.Watermark, "seed %d commit %d: stage %s at %d stored a watermark of another position", seed, c.Offset, cp.Stage, cp.Next)
				if i > 0 {
					require.LessOrEqual(t, cp.Next, cps[i-1].Next, "seed %d commit %d: stage %s stored beyond its leader", seed, c.Offset, cp.Stage)
				}
			}
		}
		t.Logf("seed %d: %d commits checked", seed, len(commits))
	}
}
