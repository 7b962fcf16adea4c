package chain_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/store"
)

// TestOffsetResetByToolDropsLocalState: a committed offset
// below the local positions with metadata that is not ours (a
// kafka-consumer-groups --reset-offsets writes empty metadata) is an
// external reset: the partition drops its local state, resumes every stage
// at the committed offset and says so in the log.
func TestOffsetResetByToolDropsLocalState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := store.NewMemory()
		var mu sync.Mutex
		calls := map[int64]int{}
		seen := map[int64]bool{} // whether the record's state key existed before it ran
		p := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			_, ok, err := pc.State().Get(e.Key)
			if err != nil {
				return chain.Fatal(err)
			}
			mu.Lock()
			calls[e.Offset]++
			seen[e.Offset] = ok
			mu.Unlock()
			return pc.State().Set(e.Key, e.Value, base)
		})
		var logs bytes.Buffer
		ch, err := chain.New([]chain.Stage{{Name: "only", Processor: p}}, testDecoder, chain.WithStore(db),
			chain.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		var recs []chain.Record
		for i := range 10 {
			recs = append(recs, chain.Record{Topic: "t", Offset: int64(i), Key: []byte{byte('a' + i)}, Value: []byte(ev("click", i))})
		}
		run := func(committed int64, md string) (last int64, lastMD string) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			committer := commitFunc(func(_ context.Context, off int64, m string) error {
				last, lastMD = off, m
				return nil
			})
			go func() {
				done <- ch.RunPartition(ctx, chain.Assignment{Topic: "t", Committed: committed, Metadata: md,
					Source: &eofSource{recs: recs}, Committer: committer})
			}()
			synctest.Wait()
			cancel()
			require.NoError(t, <-done)
			return last, lastMD
		}
		off, md := run(-1, "")
		require.Equal(t, int64(10), off)
		require.NotEmpty(t, md)
		// A tool resets the group to offset 0 (empty metadata); the local
		// state says every stage is at 10.
		clear(calls)
		off, _ = run(0, "")
		require.Equal(t, int64(10), off)
		for o := range int64(10) {
			require.Equal(t, 1, calls[o], "offset %d processed again after the reset", o)
			require.False(t, seen[o], "offset %d saw state written before the reset", o)
		}
		require.Contains(t, logs.String(), "reset")
	})
}
