package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
)

// doneRecorder is a Produce callback that counts its calls and reports the
// first one on a channel.
type doneRecorder struct {
	calls atomic.Int32
	ch    chan error
}

func newDone() *doneRecorder { return &doneRecorder{ch: make(chan error, 1)} }

func (d *doneRecorder) done(err error) {
	if d.calls.Add(1) == 1 {
		d.ch <- err
	}
}

func (d *doneRecorder) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.ch:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("done was not called")
		return nil
	}
}

// TestProducerAcksEachCallOnceAndKeepsHeaders: every Produce call's done
// runs exactly once, after all its messages are acknowledged; the records
// keep their keys, values and headers, in order per partition.
func TestProducerAcksEachCallOnceAndKeepsHeaders(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 3)
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: b.Config(), Logger: testLogger(t)})
	require.NoError(t, err)

	const calls, perCall = 20, 25
	dones := make([]*doneRecorder, calls)
	for c := range calls {
		msgs := make([]chain.Message, perCall)
		for i := range msgs {
			msgs[i] = chain.Message{
				Topic: topic,
				Key:   fmt.Appendf(nil, "k%d", i%5),
				Value: fmt.Appendf(nil, "%d/%d", c, i),
				Headers: []chain.Header{
					{Key: []byte("call"), Value: fmt.Appendf(nil, "%d", c)},
					{Key: []byte("empty"), Value: nil},
				},
			}
		}
		dones[c] = newDone()
		p.Produce(context.Background(), msgs, dones[c].done)
	}
	for _, d := range dones {
		require.NoError(t, d.wait(t))
	}
	empty := newDone()
	p.Produce(context.Background(), nil, empty.done)
	require.NoError(t, empty.wait(t), "an empty call is acknowledged at once")
	require.NoError(t, p.Close())
	for c, d := range dones {
		require.EqualValues(t, 1, d.calls.Load(), "call %d's done ran once", c)
	}

	got := b.ReadAll(t, topic, false)
	total := 0
	for _, msgs := range got {
		last := map[string][2]int{} // key -> last (call, i)
		for _, m := range msgs {
			total++
			var c, i int
			_, err := fmt.Sscanf(string(m.Value), "%d/%d", &c, &i)
			require.NoError(t, err)
			require.Len(t, m.Headers, 2)
			require.Equal(t, "call", string(m.Headers[0].Key))
			require.Equal(t, fmt.Sprint(c), string(m.Headers[0].Value))
			require.Equal(t, "empty", string(m.Headers[1].Key))
			require.Empty(t, m.Headers[1].Value)
			prev, seen := last[string(m.Key)]
			if seen {
				require.True(t, c > prev[0] || (c == prev[0] && i > prev[1]), "key %s keeps its order", m.Key)
			}
			last[string(m.Key)] = [2]int{c, i}
		}
	}
	require.Equal(t, calls*perCall, total, "every message once")
}

// TestProducerReportsTheFirstErrorOnce: a call with a message to a topic
// that does not exist fails with that error — once, even though its other
// messages succeed — and Produce after Close fails with ErrProducerClosed.
func TestProducerReportsTheFirstErrorOnce(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	missing := testbroker.Name(t, "missing")
	cfg := b.Config()
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: cfg, Logger: testLogger(t)})
	require.NoError(t, err)

	d := newDone()
	p.Produce(context.Background(), []chain.Message{
		{Topic: topic, Value: []byte("ok-1")},
		{Topic: missing, Value: []byte("lost")},
		{Topic: topic, Value: []byte("ok-2")},
	}, d.done)
	err = d.wait(t)
	require.ErrorIs(t, err, sarama.ErrUnknownTopicOrPartition)
	require.Contains(t, err.Error(), missing)

	// A hand-over cut short by its context fails with the context's error
	// instead of blocking (the chain passes the context the shutdown
	// timeout cancels).
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cut := newDone()
	p.Produce(cancelled, []chain.Message{{Topic: topic, Value: []byte("never")}}, cut.done)
	require.ErrorIs(t, cut.wait(t), context.Canceled)

	ok := newDone()
	p.Produce(context.Background(), []chain.Message{{Topic: topic, Value: []byte("ok-3")}}, ok.done)
	require.NoError(t, ok.wait(t), "the producer works on after a failed call")
	require.NoError(t, p.Close())
	require.EqualValues(t, 1, d.calls.Load(), "the failed call's done ran once")

	closed := newDone()
	p.Produce(context.Background(), []chain.Message{{Topic: topic, Value: []byte("late")}}, closed.done)
	require.True(t, errors.Is(closed.wait(t), kafka.ErrProducerClosed))
	require.NoError(t, p.Close(), "Close is idempotent")
}

func TestNewProducerNeedsBrokers(t *testing.T) {
	_, err := kafka.NewProducer(kafka.ProducerConfig{})
	require.ErrorContains(t, err, "ProducerConfig.Brokers is empty")
}

// TestProducerRetriesOutlastALeaderElection: the retry budget of a failed
// produce request (waits only, not counting the requests themselves) spans
// more than a minute, well above a leader election after a broker is lost
// (broker.session.timeout.ms, 9 s) and a paused broker's request timeout
// (30 s). Ten retries of 100 ms stopped the engine when an output
// partition's leader was killed (internal/chaos, output-leader-kill).
func TestProducerRetriesOutlastALeaderElection(t *testing.T) {
	var total time.Duration
	for n := range kafka.DefaultProducerRetries {
		total += kafka.RetryBackoff(n, kafka.DefaultProducerRetries)
	}
	require.Greater(t, total, time.Minute)
	require.Equal(t, 100*time.Millisecond, kafka.RetryBackoff(0, kafka.DefaultProducerRetries), "the first retry is quick")
	require.Equal(t, time.Second, kafka.RetryBackoff(kafka.DefaultProducerRetries-1, kafka.DefaultProducerRetries), "waits are capped")
}

// TestRecordTooLargeToDeadLetterDoesNotStopThePartition (I7): a
// 2 MiB record the decoder rejects is larger than the producer may send (as
// the CLI configures it: the decoder's limit + 64 KiB) and than the
// dead-letter topic accepts (100 kB). It must still be dead-lettered — cut,
// with its original size and hash in headers — and the partition go on,
// instead of failing at every restart.
func TestRecordTooLargeToDeadLetterDoesNotStopThePartition(t *testing.T) {
	const decodeLimit = 1 << 20
	b := testbroker.New(t)
	topic := topicWithMax(t, b, 4<<20)
	dlq := topicWithMax(t, b, 100_000)
	group := testbroker.Name(t, "group")

	big := bytes.Repeat([]byte("x"), 2<<20)
	pcfg := b.Config()
	pcfg.Producer.MaxMessageBytes = 4 << 20
	pcfg.Producer.Return.Successes = true
	sp, err := sarama.NewSyncProducer(b.Addrs(), pcfg)
	require.NoError(t, err)
	require.NoError(t, sp.SendMessages([]*sarama.ProducerMessage{
		{Topic: topic, Value: sarama.StringEncoder("click|0")},
		{Topic: topic, Value: sarama.ByteEncoder(big)},
		{Topic: topic, Value: sarama.StringEncoder("click|1")},
	}))
	require.NoError(t, sp.Close())

	prodCfg := b.Config()
	prodCfg.Producer.MaxMessageBytes = decodeLimit + 64<<10
	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: prodCfg, Logger: testLogger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, prod.Close()) }()

	limited := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		if len(r.Value) > decodeLimit {
			return chain.Decoded{}, errors.New("value too large")
		}
		return decoder.Decode(r)
	})
	noop := chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })
	w := &commitWaiter{want: 3, ch: make(chan struct{})}
	m := runMember(t, groupConfig(b, topic, group, t), func(*member) *chain.Chain {
		ch, err := chain.New([]chain.Stage{{Name: "click", Processor: noop}}, limited,
			chainOptions(t, w, chain.WithProducer(prod), chain.WithDLQTopic(dlq))...)
		require.NoError(t, err)
		return ch
	})
	recv(t, w.ch, "the commit past the large record")
	err, _ = m.stop(t)
	require.NoError(t, err)

	got := b.ReadAll(t, dlq, false)[0]
	require.Len(t, got, 1)
	h := map[string]string{}
	for _, x := range got[0].Headers {
		h[string(x.Key)] = string(x.Value)
	}
	require.Equal(t, "1", h[chain.HeaderDLQOffset])
	require.Equal(t, strconv.Itoa(len(big)), h[chain.HeaderDLQOriginalSize])
	require.NotEmpty(t, h[chain.HeaderDLQOriginalSHA256])
	require.Contains(t, h[chain.HeaderDLQTruncated], "value")
	require.LessOrEqual(t, len(got[0].Value), chain.MinDeadLetterBytes)
	require.True(t, bytes.HasPrefix(big, got[0].Value))
}

// TestProducerResendsAloneWhatARefusedBatchHeld: a small dead letter
// batched with an oversized one is refused with it (MESSAGE_TOO_LARGE for
// the batch); the Producer sends it again alone, and it is written whole.
// The oversized one, refused alone too, gets chain.ErrMessageTooLarge and
// its minimal dead letter is written. Runs on kfake and on a real broker.
func TestProducerResendsAloneWhatARefusedBatchHeld(t *testing.T) {
	b := testbroker.New(t)
	dlq, big, small, cfg := refusedBatchDeadLetters(t, b)
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: cfg, Logger: testLogger(t)})
	require.NoError(t, err)

	// Produce alone: the big one's own result.
	direct, dSmall := newDone(), newDone()
	p.Produce(context.Background(), []chain.Message{big}, direct.done)
	p.Produce(context.Background(), []chain.Message{small}, dSmall.done)
	require.ErrorIs(t, direct.wait(t), chain.ErrMessageTooLarge, "refused alone: too large")
	require.NoError(t, dSmall.wait(t), "the small one fits alone")

	// As the chain sends dead letters: both end up written.
	dBig, dSmall := newDone(), newDone()
	chain.ProduceDeadLetter(context.Background(), p, big, dBig.done)
	chain.ProduceDeadLetter(context.Background(), p, small, dSmall.done)
	require.NoError(t, dSmall.wait(t))
	require.NoError(t, dBig.wait(t))
	require.NoError(t, p.Close())

	got := deadLetters(t, b, dlq, false)
	require.Len(t, got["1"], 2, "the small dead letter, written once per call")
	for _, m := range got["1"] {
		require.False(t, truncated(m))
		require.Equal(t, "small", string(m.Value))
	}
	require.Len(t, got["0"], 1, "the big one's minimal dead letter")
	require.True(t, truncated(got["0"][0]))
	require.LessOrEqual(t, len(got["0"][0].Value), chain.MinDeadLetterBytes)
}
