package chain_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// TestDirectStageKeepsWindowAndOutcomes: a stage that runs its records on
// its own goroutine begins a record in the tracker only after its
// processor's first attempt. Every outcome must still be what
// it was: a record retried, one with outputs held unacknowledged, one
// dead-lettered; the in-flight window still bounds what the stage runs
// (I9: with 4 slots and the record at 2 held, no record above 5 is run)
// and the position never passes a record whose outputs are not
// acknowledged (I3, I5).
func TestDirectStageKeepsWindowAndOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[int64]int{}
		proc := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, ev *chain.Event) error {
			mu.Lock()
			calls[ev.Offset]++
			n := calls[ev.Offset]
			mu.Unlock()
			switch ev.Offset % 5 {
			case 1: // fails once, then succeeds
				if n == 1 {
					return errors.New("transient")
				}
			case 2: // outputs, held until released
				pc.Emit(chain.Message{Key: ev.Key, Value: []byte("out")})
			case 3:
				return chain.Permanent(errors.New("bad"))
			}
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: proc}}, testDecoder,
			chain.WithInFlight(4), chain.WithRetry(2, time.Millisecond, time.Millisecond))
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(0)
		const n = 20
		for i := range n {
			tt.Append(0, chaintest.Rec("k", ev("click", i), base.Add(time.Duration(i)*time.Second)))
		}
		// Fake time (synctest): past offset 1's retry backoff, then until
		// every goroutine is blocked.
		time.Sleep(time.Second)
		synctest.Wait()

		mu.Lock()
		ran := map[int64]int{}
		for o, c := range calls {
			ran[o] = c
		}
		mu.Unlock()
		require.Equal(t, map[int64]int{0: 1, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1}, ran,
			"held at 2 with 4 slots: 2, 3, 4, 5 fill the window and nothing above runs")
		st := tt.Stats()[0].Stages[0]
		require.Equal(t, int64(2), st.Position, "the position stops at the unacknowledged record")

		// Release until everything is acknowledged (each release lets the
		// stage run up to the next held record).
		for range 10 {
			tt.Release(nil)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		tt.SetAckMode(chaintest.AckImmediately)
		tt.Release(nil)
		tt.WaitCommitted(0, n)

		st = tt.Stats()[0].Stages[0]
		require.Equal(t, int64(n), st.Position)
		require.Equal(t, 0, st.InFlight)
		require.Equal(t, int64(4), st.Retries, "offsets 1, 6, 11, 16 retried once")
		require.Equal(t, int64(4), st.DeadLettered, "offsets 3, 8, 13, 18")
		require.Equal(t, int64(n-4), st.Processed)
		mu.Lock()
		defer mu.Unlock()
		for o := range int64(n) {
			want := 1
			if o%5 == 1 {
				want = 2
			}
			require.Equal(t, want, calls[o], "offset %d", o)
		}
		require.NoError(t, tt.Stop())
		require.Len(t, tt.Outputs("dlq"), 4)
	})
}

// TestWindowWiderThanTheSpanWaitsInsteadOfFailing: with an in-flight
// window wider than the span a checkpoint can carry (commit.MaxAboveSpan),
// a stage that runs records on its own goroutine must wait, not fail, when
// a record far ahead of an incomplete one would leave the span. Here the
// last stage's record 0 waits for its output's acknowledgement while the
// records after it complete at once; a direct path that began offset
// 0+span+1 in the tracker would be refused (commit.ErrWindowFull), and the
// partition would fail with "tracker window full" (under load, where an
// acknowledgement comes late).
func TestWindowWiderThanTheSpanWaitsInsteadOfFailing(t *testing.T) {
	span := commit.MaxAboveSpan(3)
	require.Positive(t, span)
	n := span + 100
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[string]map[int64]int{}
		proc := func(name string, emit bool) chain.Processor {
			return chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
				mu.Lock()
				if calls[name] == nil {
					calls[name] = map[int64]int{}
				}
				calls[name][ev.Offset]++
				mu.Unlock()
				if emit && ev.Offset == 0 {
					pc.Emit(chain.Message{Value: []byte("out@0")})
				}
				return nil
			})
		}
		stages := []chain.Stage{
			{Name: "a", Processor: proc("a", false)},
			{Name: "b", Processor: proc("b", false)},
			{Name: "c", Processor: proc("c", true)},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithInFlight(2*n))
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(0)
		recs := make([]chain.Record, n)
		for i := range recs {
			recs[i] = chaintest.Rec(fmt.Sprintf("u%d", i%7), ev("click", i), base)
		}
		tt.Append(0, recs...)
		synctest.Wait()
		tt.Release(nil)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		for _, name := range []string{"a", "b", "c"} {
			require.Len(t, calls[name], n, "stage %s processed every record", name)
			for o, c := range calls[name] {
				require.Equal(t, 1, c, "stage %s, offset %d", name, o)
			}
		}
		commits := tt.Commits(0)
		require.Equal(t, int64(n), commits[len(commits)-1].Offset)
	})
}

// TestI2HandoffIsExact forces followers out of a tiny buffer and back many
// times (slow followers, fast leader) and checks that every stage processes
// every offset exactly once and in order, across polling-mode switches.
func TestI2HandoffIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		// Followers are 50x slower than the leader: they fall out of the
		// 16-record buffer, poll, catch up in idle gaps, switch back.
		cost := func(stage string) func(int64) time.Duration {
			return func(o int64) time.Duration {
				if stage == "click" {
					return 0
				}
				return time.Millisecond
			}
		}
		stages := []chain.Stage{
			{Name: "click", Processor: r.proc(false, cost("click"))},
			{Name: "install", Processor: r.proc(false, cost("install"))},
			{Name: "purchase", Processor: r.proc(false, cost("purchase"))},
		}
		obs := newInvariantObserver(t, 0, 0)
		tt := chaintest.New(t, stages, testDecoder, chain.WithObserver(obs),
			chain.WithBufferSize(16), chain.WithBatchSize(4))
		tt.Log(0).SetMaxBatch(8)
		tt.Start(0)
		rng := rand.New(rand.NewPCG(3, 4))
		total := 0
		for range 30 {
			recs := workload(rng, 50+rng.IntN(150), 5, 0)
			total += len(recs)
			tt.Append(0, recs...)
			if rng.IntN(2) == 0 {
				tt.Log(0).Skip(int64(rng.IntN(3))) // offset gaps
			}
			tt.WaitIdle()
		}
		stats := tt.Stats()
		require.NoError(t, tt.Stop())
		obs.check()
		want := obs.begun[0]
		require.Len(t, want, total)
		for _, st := range []string{"click", "install", "purchase"} {
			require.Equal(t, want, r.order[st], "stage %s: every offset once, in order", st)
		}
		require.Greater(t, tt.Log(0).Polls(), 10, "followers must have switched to polling many times")
		var switches int64
		for _, s := range stats[0].Stages {
			switches += s.Switches
		}
		require.Greater(t, switches, int64(20))
	})
}

// eofSource delivers its records once; its pollers fail at once with
// pollErr (io.EOF when nil).
type eofSource struct {
	recs    []chain.Record
	sent    bool
	pollErr error
}

func (s *eofSource) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	if !s.sent {
		s.sent = true
		return append(dst, s.recs...), nil
	}
	<-ctx.Done()
	return dst, ctx.Err()
}

func (s *eofSource) HighWatermark() int64 { return int64(len(s.recs)) }

func (s *eofSource) Poll(context.Context, int64) (chain.Poller, error) {
	if s.pollErr == nil {
		return eofPoller{io.EOF}, nil
	}
	return eofPoller{s.pollErr}, nil
}

type eofPoller struct{ err error }

func (p eofPoller) Fetch(context.Context, []chain.Record) ([]chain.Record, error) { return nil, p.err }

func (eofPoller) Close() error { return nil }

// A follower's poller that ends (io.EOF) is a failure of the partition, not
// the end of the claim: RunPartition must return an error instead of
// leaving the followers waiting in silence. The io.EOF is not in the
// returned error's chain (it would read as a clean end); any other poller
// error is.
func TestPollerEndFailsThePartition(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		err := runWithFailingPoller(t, nil)
		require.ErrorContains(t, err, "polling at offset")
		require.NotErrorIs(t, err, io.EOF)
	})
	t.Run("error", func(t *testing.T) {
		broken := errors.New("broken connection")
		err := runWithFailingPoller(t, broken)
		require.ErrorContains(t, err, "polling at offset")
		require.ErrorIs(t, err, broken)
	})
}

func runWithFailingPoller(t *testing.T, pollErr error) (runErr error) {
	synctest.Test(t, func(t *testing.T) {
		var recs []chain.Record
		for i := range 100 {
			recs = append(recs, chain.Record{Topic: "t", Offset: int64(i), Value: []byte(ev("click", i))})
		}
		release := make(chan struct{})
		hold := chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
			if e.Offset == 1 {
				<-release // the follower falls out of the 4-record buffer
			}
			return nil
		})
		ch, err := chain.New([]chain.Stage{{Name: "a", Processor: noop}, {Name: "b", Processor: hold}, {Name: "c", Processor: noop}},
			testDecoder, chain.WithBufferSize(4), chain.WithBatchSize(2), chain.WithIdleTimeout(time.Millisecond))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- ch.RunPartition(context.Background(), chain.Assignment{Topic: "t", Committed: 0, Source: &eofSource{recs: recs, pollErr: pollErr}, Committer: nopCommitter{}})
		}()
		synctest.Wait() // the leader has run ahead; the follower is held
		close(release)
		runErr = <-done
	})
	return runErr
}
