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

// TestCleanStopKeyParallelRepeatsNothing (I6): key A's offset 0 is slow,
// offset 1 (key A) waits behind it, key B's offset 2 completes at once. A
// clean stop must let the begun offset 1 run too — dropping it would leave
// the position at 1 below the completed 2, and a restart would process 2
// again.
func TestCleanStopKeyParallelRepeatsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		slow := func(o int64) time.Duration {
			if o == 0 {
				return 10 * time.Millisecond
			}
			return 0
		}
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: r.proc(true, slow), KeyConcurrency: 2}}, testDecoder)
		tt.Append(0,
			chaintest.Rec("A", ev("click", 1), base),
			chaintest.Rec("A", ev("click", 2), base),
			chaintest.Rec("B", ev("click", 3), base))
		tt.Start(0)
		synctest.Wait() // 0 in its processor, 1 queued behind it, 2 done
		require.Equal(t, map[int64]int{2: 1}, r.callsOf("only"))
		require.NoError(t, tt.Stop())
		commits := tt.Commits(0)
		require.Equal(t, int64(3), commits[len(commits)-1].Offset, "the final commit covers every begun record")

		tt.Start(0)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Equal(t, map[int64]int{0: 1, 1: 1, 2: 1}, r.callsOf("only"), "each record processed once across the restart")
		require.Len(t, tt.Outputs("output"), 3)
	})
}

// TestStopWhileKeyParallelRecordWaitsToRetry (I10): a stop that finds a
// record of a key-parallel stage waiting between two attempts is a clean
// stop — the begun record finishes (its retry runs within the shutdown
// timeout) and Stop returns nil, not context.Canceled.
func TestStopWhileKeyParallelRecordWaitsToRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		attempts := map[int64]int{}
		p := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			mu.Lock()
			attempts[e.Offset]++
			n := attempts[e.Offset]
			mu.Unlock()
			if e.Offset == 0 && n == 1 {
				return errFlaky
			}
			pc.Emit(chain.Message{Value: e.Value})
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: p, KeyConcurrency: 2}}, testDecoder,
			chain.WithRetry(3, time.Second, time.Second))
		tt.Append(0, chaintest.Rec("A", ev("click", 1), base), chaintest.Rec("B", ev("click", 2), base))
		tt.Start(0)
		synctest.Wait() // offset 0 waits a second for its second attempt
		require.NoError(t, tt.Stop())
		require.Equal(t, map[int64]int{0: 2, 1: 1}, attempts)
		commits := tt.Commits(0)
		require.Equal(t, int64(2), commits[len(commits)-1].Offset)
		require.Len(t, tt.Outputs("output"), 2)
	})
}

// heldProducer keeps every done callback until release.
type heldProducer struct {
	mu   sync.Mutex
	held []func(error)
}

func (h *heldProducer) Produce(_ context.Context, _ []chain.Message, done func(error)) {
	h.mu.Lock()
	h.held = append(h.held, done)
	h.mu.Unlock()
}

func (h *heldProducer) release(err error) {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, done := range held {
		done(err)
	}
}

type commitFunc func(ctx context.Context, offset int64, md string) error

func (f commitFunc) Commit(ctx context.Context, offset int64, md string) error {
	return f(ctx, offset, md)
}

// TestLateErrorOfAbandonedRecordDoesNotFailThePartition: after
// the shutdown timeout abandoned a record waiting for its acknowledgement,
// the producer's late error for it (here during the final commit) must not
// fail the partition: RunPartition returns ErrShutdownTimeout, and under
// -race the late error does not race the partition's own read of its error.
func TestLateErrorOfAbandonedRecordDoesNotFailThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prod := &heldProducer{}
		emit := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			if e.Offset == 1 {
				pc.Emit(chain.Message{Value: e.Value})
			}
			return nil
		})
		ch, err := chain.New([]chain.Stage{{Name: "only", Processor: emit}}, testDecoder,
			chain.WithProducer(prod), chain.WithOutputTopic("out"), chain.WithShutdownTimeout(time.Second))
		require.NoError(t, err)
		var stopping sync.Once
		var commits []int64
		committer := commitFunc(func(_ context.Context, off int64, _ string) error {
			commits = append(commits, off)
			stopping.Do(func() { prod.release(errors.New("broker gone")) })
			return nil
		})
		recs := []chain.Record{
			{Topic: "t", Offset: 0, Value: []byte(ev("click", 0))},
			{Topic: "t", Offset: 1, Value: []byte(ev("click", 1))},
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- ch.RunPartition(ctx, chain.Assignment{Topic: "t", Committed: 0, Source: &eofSource{recs: recs}, Committer: committer})
		}()
		synctest.Wait() // offset 1 waits for its acknowledgement
		cancel()
		err = <-done
		require.ErrorIs(t, err, chain.ErrShutdownTimeout)
		require.NotContains(t, err.Error(), "broker gone")
		require.Equal(t, []int64{1}, commits, "the final commit covers what completed")
	})
}

// TestProcessorIgnoringItsContextDoesNotBlockTheStop: a processor that never
// returns, even when the shutdown timeout cancels its context, must not hold
// a revoke for ever: the partition abandons it (and logs the stage and
// offset), makes the final commit and returns ErrShutdownTimeout.
func TestProcessorIgnoringItsContextDoesNotBlockTheStop(t *testing.T) {
	for _, keyConc := range []int{0, 2} {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			stuck := chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
				if e.Offset == 1 {
					<-release // ignores its context
				}
				return nil
			})
			const timeout = 5 * time.Second
			ch, err := chain.New([]chain.Stage{{Name: "only", Processor: stuck, KeyConcurrency: keyConc}}, testDecoder,
				chain.WithShutdownTimeout(timeout))
			require.NoError(t, err)
			var commits []int64
			committer := commitFunc(func(_ context.Context, off int64, _ string) error {
				commits = append(commits, off)
				return nil
			})
			recs := []chain.Record{
				{Topic: "t", Offset: 0, Key: []byte("a"), Value: []byte(ev("click", 0))},
				{Topic: "t", Offset: 1, Key: []byte("b"), Value: []byte(ev("click", 1))},
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- ch.RunPartition(ctx, chain.Assignment{Topic: "t", Committed: 0, Source: &eofSource{recs: recs}, Committer: committer})
			}()
			synctest.Wait()
			start := time.Now()
			cancel()
			err = <-done
			require.ErrorIs(t, err, chain.ErrShutdownTimeout)
			require.LessOrEqual(t, time.Since(start), 2*timeout, "the stop is bounded")
			require.Equal(t, []int64{1}, commits)
			close(release) // the abandoned goroutine ends; its completion changes nothing
			synctest.Wait()
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
