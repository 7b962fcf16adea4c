package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
)

// fakeSession is a sarama.ConsumerGroupSession of no group member (its
// commits are a non-member's).
type fakeSession struct{ ctx context.Context }

func (s fakeSession) Claims() map[string][]int32                  { return nil }
func (s fakeSession) MemberID() string                            { return "" }
func (s fakeSession) GenerationID() int32                         { return -1 }
func (s fakeSession) MarkOffset(string, int32, int64, string)     {}
func (s fakeSession) Commit()                                     {}
func (s fakeSession) ResetOffset(string, int32, int64, string)    {}
func (s fakeSession) MarkMessage(*sarama.ConsumerMessage, string) {}
func (s fakeSession) Context() context.Context                    { return s.ctx }

// fakeClaim behaves as sarama's claim does on a cooperative revoke: the
// partition consumer stops, its Errors channel closes, and its Messages
// channel closes with the messages it buffered still in it.
type fakeClaim struct {
	topic string
	msgs  chan *sarama.ConsumerMessage
	errs  chan *sarama.ConsumerError
}

func (c *fakeClaim) Topic() string                            { return c.topic }
func (c *fakeClaim) Partition() int32                         { return 0 }
func (c *fakeClaim) InitialOffset() int64                     { return 0 }
func (c *fakeClaim) HighWaterMarkOffset() int64               { return int64(cap(c.msgs)) }
func (c *fakeClaim) Messages() <-chan *sarama.ConsumerMessage { return c.msgs }
func (c *fakeClaim) Errors() <-chan *sarama.ConsumerError     { return c.errs }
func (c *fakeClaim) revoke()                                  { close(c.errs); close(c.msgs) }

// TestCooperativeRevokeStopsThePartitionAtOnce: with the
// handoff buffer full and stage 0 busy, a revoke (sarama closes the claim,
// the session goes on) must stop the partition at once — the record in hand
// finishes, nothing more is begun — instead of after stage 0 worked through
// every message sarama still buffered for the claim.
func TestCooperativeRevokeStopsThePartitionAtOnce(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	client, err := sarama.NewClient(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()

	started, release := make(chan struct{}), make(chan struct{})
	var processed atomic.Int64
	p := chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
		if e.Offset == 0 {
			close(started)
			<-release
		}
		processed.Add(1)
		return nil
	})
	ch, err := chain.New([]chain.Stage{{Name: "only", Processor: p}},
		chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) { return chain.Decoded{Time: r.Timestamp}, nil }),
		chain.WithBufferSize(4), chain.WithBatchSize(2), chain.WithShutdownTimeout(10*time.Second))
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	r := &runner{ch: ch, cfg: &Config{Topic: topic, Group: group, FetchBatch: 2}, log: log,
		offsets: newOffsets(client, group), poll: &pollClient{client: client, log: log}, cancel: func(error) {}}
	revoked := make(chan struct{})
	h := &handler{r: r, initial: map[int32]committed{0: {offset: 0}}, revoked: func(int32) { close(revoked) }}

	const n = 100
	claim := &fakeClaim{topic: topic, msgs: make(chan *sarama.ConsumerMessage, n), errs: make(chan *sarama.ConsumerError)}
	for i := range n {
		claim.msgs <- &sarama.ConsumerMessage{Topic: topic, Offset: int64(i), Value: fmt.Appendf(nil, "%d", i), Timestamp: time.Unix(int64(i), 0)}
	}
	done := make(chan error, 1)
	go func() { done <- h.ConsumeClaim(fakeSession{ctx: context.Background()}, claim) }()
	<-started // offset 0 in its processor; the buffer full behind it
	claim.revoke()
	<-revoked // the claim's context ended (not waiting for the messages)
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("ConsumeClaim did not return")
	}
	require.Equal(t, int64(1), processed.Load(), "nothing begun after the revoke")
	got, err := r.offsets.fetch(context.Background(), topic, []int32{0})
	require.NoError(t, err)
	require.Equal(t, int64(1), got[0].offset, "the final commit covers the record in hand")
}
