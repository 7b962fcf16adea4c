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

// workload returns n records over users with mostly increasing event times,
// types in click/install/purchase, and a few invalid ones.
func workload(rng *rand.Rand, n, users int, invalidEvery int) []chain.Record {
	types := []string{"click", "install", "purchase"}
	recs := make([]chain.Record, n)
	sec := 0
	for i := range recs {
		sec += rng.IntN(3)
		t := sec - rng.IntN(5) // a little disorder
		v := ev(types[rng.IntN(3)], max(t, 0))
		if invalidEvery > 0 && i%invalidEvery == invalidEvery-1 {
			v = "bad"
		}
		recs[i] = chaintest.Rec("u"+string(rune('a'+rng.IntN(users))), v, base.Add(time.Duration(sec)*time.Second))
	}
	return recs
}

func TestChainProcessesEveryRecordOnceInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		obs := newInvariantObserver(t, 0, 0)
		tt := chaintest.New(t, threeStages(r, true, 0, nil), testDecoder, chain.WithObserver(obs), chain.WithBufferSize(64), chain.WithBatchSize(16))
		tt.Start(0)
		recs := workload(rand.New(rand.NewPCG(1, 2)), 1000, 5, 50)
		tt.Feed(0, recs...)
		require.NoError(t, tt.Stop())
		obs.check()

		// Every stage began every offset exactly once, in order.
		for s := range 3 {
			require.Len(t, obs.begun[s], len(recs), "stage %d", s)
			for i, o := range obs.begun[s] {
				require.Equal(t, int64(i), o, "stage %d", s)
			}
		}
		// Each stage processed exactly its type, once.
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, len(recs)/50)
		total := 0
		for _, st := range []string{"click", "install", "purchase"} {
			for o, c := range r.calls[st] {
				require.Equal(t, 1, c, "stage %s offset %d", st, o)
			}
			total += len(r.calls[st])
		}
		require.Equal(t, len(recs)-len(dlq), total)
		require.Len(t, tt.Outputs("output"), total)
		commits := tt.Commits(0)
		require.NotEmpty(t, commits)
		require.Equal(t, int64(len(recs)), commits[len(commits)-1].Offset)
	})
}
