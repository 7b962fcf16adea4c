package chain_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestCommitNeverPassesUnackedOutput holds output acknowledgements: no commit
// may cover a record whose outputs are not acknowledged (DESIGN I5, I3).
func TestCommitNeverPassesUnackedOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, true, 0, nil), testDecoder, chain.WithCommitInterval(time.Millisecond))
		tt.Start(0)
		tt.Feed(0, chaintest.Rec("a", ev("click", 1), base), chaintest.Rec("a", ev("install", 2), base))
		tt.SetAckMode(chaintest.AckHold)
		tt.Append(0, chaintest.Rec("a", ev("click", 3), base), chaintest.Rec("a", ev("install", 4), base), chaintest.Rec("b", ev("purchase", 5), base))
		time.Sleep(50 * time.Millisecond) // fake time: many commit intervals pass
		synctest.Wait()
		commits := tt.Commits(0)
		require.Equal(t, int64(2), commits[len(commits)-1].Offset, "commit must stop at the first unacknowledged record")
		// Acknowledge immediately first, then release what was held: in
		// the other order an output produced between the two calls (the
		// release lets the stages run on) would be held for ever.
		tt.SetAckMode(chaintest.AckImmediately)
		tt.Release(nil)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		commits = tt.Commits(0)
		require.Equal(t, int64(5), commits[len(commits)-1].Offset)
	})
}

var errFlaky = errors.New("flaky")

// TestProcessorErrors: retriable errors retry with backoff then dead-letter
// (DESIGN I8); permanent errors dead-letter at once; a fatal error stops the
// partition with only complete records committed; invalid records are
// dead-lettered with their source in headers (I7) and their neighbours run.
func TestProcessorErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := map[int64]int{}
		p := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			attempts[e.Offset]++
			switch e.Offset {
			case 1: // succeeds on the third attempt
				if attempts[1] < 3 {
					return errFlaky
				}
			case 2:
				return errFlaky // always: dead-lettered after retries
			case 3:
				return chain.Permanent(errFlaky)
			}
			pc.Emit(chain.Message{Value: []byte("ok")})
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p}}, testDecoder,
			chain.WithRetry(4, 10*time.Millisecond, 20*time.Millisecond))
		tt.Start(0)
		tt.Feed(0,
			chaintest.Rec("k", ev("click", 0), base),
			chaintest.Rec("k", ev("click", 1), base),
			chaintest.Rec("k", ev("click", 2), base),
			chaintest.Rec("k", ev("click", 3), base),
			chaintest.Rec("k", "garbage", base),
			chaintest.Rec("k", ev("click", 5), base),
		)
		require.NoError(t, tt.Stop())
		require.Equal(t, 3, attempts[1])
		require.Equal(t, 5, attempts[2], "1 attempt + 4 retries")
		require.Equal(t, 1, attempts[3])
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 3)
		offsets := []string{}
		for _, m := range dlq {
			h := map[string]string{}
			for _, x := range m.Headers {
				h[string(x.Key)] = string(x.Value)
			}
			offsets = append(offsets, h[chain.HeaderDLQOffset])
			require.Equal(t, chaintest.Topic, h[chain.HeaderDLQTopic])
			require.Equal(t, "0", h[chain.HeaderDLQPartition])
			require.NotEmpty(t, h[chain.HeaderDLQReason])
		}
		require.Equal(t, []string{"2", "3", "4"}, offsets)
		require.Equal(t, "garbage", string(dlq[2].Value))
		require.Len(t, tt.Outputs("output"), 3) // offsets 0, 1, 5

		// Fatal: stops the partition, commits only what completed.
		fatal := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			if e.Offset == 8 {
				return chain.Fatal(errors.New("disk on fire"))
			}
			return nil
		})
		tt2 := chaintest.New(t, []chain.Stage{{Name: "only", Processor: fatal}}, testDecoder)
		tt2.Start(0)
		for i := range 12 {
			tt2.Append(0, chaintest.Rec("k", ev("click", i), base))
		}
		synctest.Wait()
		err := tt2.Stop()
		require.Error(t, err)
		var pe *chain.PartitionError
		require.ErrorAs(t, err, &pe)
		require.ErrorContains(t, err, "disk on fire")
		commits := tt2.Commits(0)
		require.Equal(t, int64(8), commits[len(commits)-1].Offset)
	})
}
