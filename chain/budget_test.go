package chain_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// bufferCaps is every running partition's buffer capacity, by partition.
func bufferCaps(ch *chain.Chain) map[int32]int {
	caps := map[int32]int{}
	for _, ps := range ch.Stats() {
		caps[ps.Partition] = ps.BufferCap
	}
	return caps
}

// TestBufferBudgetIsSharedAmongPartitions: a budget of 16,384 records over
// 4 running partitions gives each a buffer of 4,096; a fifth partition
// brings every share down to 3,276, and its stop gives them 4,096 back.
// Every partition still processes its whole log through its smaller buffer.
func TestBufferBudgetIsSharedAmongPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, noopStages(2), testDecoder,
			chain.WithBufferSize(8192), chain.WithBatchSize(256), chain.WithBufferBudget(16_384))
		for p := range int32(5) {
			for i := range 3000 {
				tt.Log(p).Append(chaintest.Rec(fmt.Sprintf("k%d", i%50), ev("click", i), base))
			}
		}
		tt.Start(0, 1, 2, 3)
		tt.WaitIdle()
		require.Equal(t, map[int32]int{0: 4096, 1: 4096, 2: 4096, 3: 4096}, bufferCaps(tt.Chain()))

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- tt.Chain().RunPartition(ctx, chain.Assignment{Topic: "t", Partition: 4, Committed: -1, Source: tt.Log(4), Committer: nopCommitter{}})
		}()
		synctest.Wait()
		time.Sleep(2 * chain.DefaultIdleTimeout) // the tail's idle release lets the follower finish
		synctest.Wait()
		require.Equal(t, map[int32]int{0: 3276, 1: 3276, 2: 3276, 3: 3276, 4: 3276}, bufferCaps(tt.Chain()))
		for _, ps := range tt.Chain().Stats() {
			for _, st := range ps.Stages {
				require.Equal(t, int64(3000), st.Position, "partition %d stage %s processed its whole log", ps.Partition, st.Name)
			}
		}

		cancel()
		require.NoError(t, <-done)
		require.Equal(t, map[int32]int{0: 4096, 1: 4096, 2: 4096, 3: 4096}, bufferCaps(tt.Chain()))
		require.NoError(t, tt.Stop())
	})
}

// TestBufferBudgetShareFloor: a budget too small for the partitions gives
// each the floor (the read-ahead and two batches), not less, and never
// more than WithBufferSize.
func TestBufferBudgetShareFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		floor := chain.BufferShareFloor(256, 0)
		require.Equal(t, 1536, floor)
		tt := chaintest.New(t, noopStages(2), testDecoder,
			chain.WithBufferSize(8192), chain.WithBatchSize(256), chain.WithBufferBudget(2000))
		for p := range int32(3) {
			tt.Log(p).Append(chaintest.Rec("k", ev("click", 0), base))
		}
		tt.Start(0, 1, 2)
		tt.WaitIdle()
		require.Equal(t, map[int32]int{0: floor, 1: floor, 2: floor}, bufferCaps(tt.Chain()))
		require.NoError(t, tt.Stop())

		big := chaintest.New(t, noopStages(2), testDecoder,
			chain.WithBufferSize(2048), chain.WithBatchSize(256), chain.WithBufferBudget(1_000_000))
		big.Log(0).Append(chaintest.Rec("k", ev("click", 0), base))
		big.Start(0)
		big.WaitIdle()
		require.Equal(t, map[int32]int{0: 2048}, bufferCaps(big.Chain()))
		require.NoError(t, big.Stop())
	})
}

func TestBufferBudgetMustNotBeNegative(t *testing.T) {
	_, err := chain.New(noopStages(1), testDecoder, chain.WithBufferBudget(-1))
	require.ErrorContains(t, err, "buffer budget must be >= 0")
}
