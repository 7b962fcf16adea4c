package chain_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/buffer"
	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

type beginCounter struct {
	mu    sync.Mutex
	begun map[int64]int
}

func (b *beginCounter) Begin(i chain.BeginInfo) {
	b.mu.Lock()
	b.begun[i.Offset]++
	b.mu.Unlock()
}
func (b *beginCounter) Advanced(string, int32, int, int64, time.Time) {}
func (b *beginCounter) Committed(string, int32, int64, string)        {}

// A record the gate let through but the full in-flight window refused
// before a stop was never begun: it must not be reported as begun (it is
// begun, once, after the restart).
func TestStopWithFullWindowReportsNoPhantomBegin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &beginCounter{begun: map[int64]int{}}
		emit := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			pc.Emit(chain.Message{Value: e.Value})
			return nil
		})
		tt := chaintest.New(t, []chain.Stage{{Name: "a", Processor: emit}}, testDecoder,
			chain.WithObserver(obs), chain.WithInFlight(2), chain.WithShutdownTimeout(time.Second))
		tt.SetAckMode(chaintest.AckHold)
		for range 5 {
			tt.Append(0, chaintest.Rec("k", ev("click", 1), base))
		}
		tt.Start(0)
		synctest.Wait() // offsets 0 and 1 in flight, 2 waits for a slot
		go func() { synctest.Wait(); tt.Release(nil) }()
		require.NoError(t, tt.Stop())
		tt.SetAckMode(chaintest.AckImmediately)
		tt.Start(0)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		for o := range int64(5) {
			require.Equal(t, 1, obs.begun[o], "offset %d begun once", o)
		}
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
func (eofPoller) Close() error                                                    { return nil }

type nopCommitter struct{}

func (nopCommitter) Commit(context.Context, int64, string) error { return nil }

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
