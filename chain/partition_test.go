package chain_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/buffer"
	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/store"
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

// failingStore is a store.Memory whose checkpoints fail while fail is set.
type failingStore struct {
	*store.Memory
	fail *atomic.Bool
}

func (s failingStore) OpenPartition(topic string, partition int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.Memory.OpenPartition(topic, partition, stages)
	if err != nil {
		return nil, err
	}
	return failingPartition{ps, s.fail}, nil
}

type failingPartition struct {
	chain.PartitionStore
	fail *atomic.Bool
}

var errInjectedStore = errors.New("injected store write failure")

func (p failingPartition) Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error {
	if p.fail.Load() {
		return errInjectedStore
	}
	return p.PartitionStore.Checkpoint(cps, evictBefore)
}

// A final checkpoint whose store write fails (no changelog) is a failed
// final commit too: Stop reports ErrFinalCommit with the cause, and the
// restart resumes from the last commit, every output once or repeated
// identically.
func TestFailedFinalStoreWriteIsAFailedFinalCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Hour), chain.WithStore(failingStore{store.NewMemory(), &fail}))
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 20)...)
		require.NoError(t, tt.Stop())
		tt.Start(0)
		tt.Feed(0, tallyRecords(20, 20)...)
		fail.Store(true)
		err := tt.Stop()
		require.ErrorIs(t, err, chain.ErrFinalCommit)
		require.ErrorIs(t, err, errInjectedStore, "the cause is joined")

		fail.Store(false)
		tt.Start(0)
		tt.Feed(0, tallyRecords(40, 10)...)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), distinct(t, sortedOutputs(tt)))
	})
}

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

type nopCommitter struct{}

func (nopCommitter) Commit(context.Context, int64, string) error { return nil }

// A source that delivers offsets out of order (a broken adapter) fails the
// partition with buffer.ErrOrder instead of stopping the fetcher quietly,
// which would leave every stage waiting for records that never come.
func TestOutOfOrderSourceFailsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := []chain.Record{
			{Topic: "t", Offset: 0, Value: []byte(ev("click", 0))},
			{Topic: "t", Offset: 2, Value: []byte(ev("click", 2))},
			{Topic: "t", Offset: 1, Value: []byte(ev("click", 1))},
		}
		ch, err := chain.New([]chain.Stage{{Name: "a", Processor: noop}}, testDecoder)
		require.NoError(t, err)
		// Fake time: without the failure the partition would sit idle
		// until this deadline and return without ErrOrder.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = ch.RunPartition(ctx, chain.Assignment{Topic: "t", Committed: 0, Source: &eofSource{recs: recs}, Committer: nopCommitter{}})
		require.ErrorIs(t, err, buffer.ErrOrder)
	})
}

// TestCleanStopAndRestartRepeatsNothing stops the chain mid-run (the
// SIGTERM path), checks the final commit equals what completed, restarts,
// and checks every record was processed exactly once across both runs.
func TestCleanStopAndRestartRepeatsNothing(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRecorder()
				rng := rand.New(rand.NewPCG(seed, 1))
				cost := func(o int64) time.Duration { return time.Duration(o%7) * 100 * time.Microsecond }
				obs := newInvariantObserver(t, 3, 0)
				tt := chaintest.New(t, threeStages(r, true, int(seed%2)*4, cost), testDecoder,
					chain.WithOffsetDistance(3), chain.WithObserver(obs), chain.WithBufferSize(64), chain.WithBatchSize(16))
				tt.Start(0)
				recs := workload(rng, 2000, 9, 0)
				tt.Append(0, recs...)
				time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond) // fake time: stop mid-run
				stats := tt.Stats()
				require.NoError(t, tt.Stop())
				commits := tt.Commits(0)
				last := commits[len(commits)-1]
				require.Less(t, last.Offset, int64(len(recs)), "the stop should land mid-run")
				// Final commit = the slowest stage's position at stop.
				require.GreaterOrEqual(t, last.Offset, stats[0].Stages[2].Position)

				tt.Start(0)
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				obs.check()
				for _, st := range []string{"click", "install", "purchase"} {
					for o, c := range r.calls[st] {
						require.Equal(t, 1, c, "stage %s offset %d processed %d times across restart", st, o, c)
					}
				}
				n := 0
				for _, st := range []string{"click", "install", "purchase"} {
					n += len(r.calls[st])
				}
				require.Equal(t, len(recs), n, "nothing lost")
				commits = tt.Commits(0)
				require.Equal(t, int64(len(recs)), commits[len(commits)-1].Offset)
			})
		})
	}
}

// TestShutdownTimeoutAbandonsStuckRecord: a processor that never returns does
// not block the stop past the shutdown timeout; its record is not committed.
func TestShutdownTimeoutAbandonsStuckRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			if e.Offset == 3 {
				<-ctx.Done() // honours only the abandonment
				return ctx.Err()
			}
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: stuck}}, testDecoder,
			chain.WithShutdownTimeout(5*time.Second))
		tt.Start(0)
		for i := range 6 {
			tt.Append(0, chaintest.Rec("k", ev("click", i), base))
		}
		time.Sleep(time.Second)
		start := time.Now()
		err := tt.Stop()
		require.ErrorIs(t, err, chain.ErrShutdownTimeout)
		require.Equal(t, 5*time.Second, time.Since(start))
		commits := tt.Commits(0)
		require.Equal(t, int64(3), commits[len(commits)-1].Offset)
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
