package chain_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestI1NoOvertakingRandomized checks DESIGN I1 and the gate's lateness rule
// at every record begun, over random distances, lateness, buffer sizes,
// key-parallelism, acknowledgement orders and processing costs.
func TestI1NoOvertakingRandomized(t *testing.T) {
	for seed := range uint64(24) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				d := int64(rng.IntN(20))
				lateness := time.Duration(rng.IntN(10)) * time.Second
				bufSize := int(d) + 2 + rng.IntN(200)
				keyConc := []int{0, 0, 4, 16}[rng.IntN(4)]
				r := newRecorder()
				costRng := rand.New(rand.NewPCG(seed, 9))
				costs := make([]time.Duration, 2000)
				for i := range costs {
					costs[i] = time.Duration(costRng.IntN(2000)) * time.Microsecond
				}
				obs := newCompletionChecker(t, d, lateness)
				tt := chaintest.New(t, threeStages(r, rng.IntN(2) == 0, keyConc, func(o int64) time.Duration { return costs[o%2000] }),
					testDecoder, chain.WithObserver(obs), chain.WithOffsetDistance(d), chain.WithLateness(lateness),
					chain.WithBufferSize(bufSize), chain.WithBatchSize(min(bufSize, 1+rng.IntN(32))), chain.WithInFlight(64))
				if rng.IntN(2) == 0 {
					tt.SetAckMode(chaintest.AckAsync)
				}
				tt.Log(0).SetMaxBatch(1 + rng.IntN(100))
				tt.Start(0)
				recs := workload(rng, 1500, 7, 97)
				// Feed in bursts so the gate sees both a busy and an idle leader.
				for i := 0; i < len(recs); {
					n := min(len(recs)-i, 1+rng.IntN(400))
					tt.Append(0, recs[i:i+n]...)
					i += n
					if rng.IntN(3) == 0 {
						tt.WaitIdle()
					}
				}
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				obs.check()
				for s := range 3 {
					require.Equal(t, seq(0, int64(len(recs))), obs.begun[s], "stage %d began each offset once in order", s)
				}
			})
		})
	}
}

// TestGateSaturatesAtTheEndOfTime: an event time near the largest the
// engine represents plus the lateness overflows int64 nanoseconds; the gate
// must not wrap around and release a follower early (I1's lateness rule),
// only by idleness.
func TestGateSaturatesAtTheEndOfTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		late := time.Date(2262, 4, 11, 23, 30, 0, 0, time.UTC)
		secs := int(late.Sub(base) / time.Second)
		obs := newInvariantObserver(t, 0, time.Hour)
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, false, 0, nil), testDecoder,
			chain.WithObserver(obs), chain.WithLateness(time.Hour))
		tt.Start(0)
		tt.Feed(0, chaintest.Rec("u", ev("click", secs), base), chaintest.Rec("u", ev("install", secs), base))
		require.NoError(t, tt.Stop())
		obs.check()
		require.Equal(t, 1, r.calls["install"][1])
		require.Positive(t, obs.idles, "released by idleness only")
	})
}
