package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
)

// topicWithMax creates a topic whose records may be up to maxBytes.
func topicWithMax(t *testing.T, b *testbroker.Broker, maxBytes int) string {
	t.Helper()
	name := testbroker.Name(t, "big")
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	td := kadmin.NewTopic(1)
	v := strconv.Itoa(maxBytes)
	td.ConfigEntries["max.message.bytes"] = &v
	require.NoError(t, admin.CreateTopic(name, td, false))
	if b.Real() {
		t.Cleanup(func() { _ = admin.DeleteTopic(name) })
	}
	require.NoError(t, kadmin.AwaitLeaders(b.Addrs(), b.Config(), name, 1, 30*time.Second))
	return name
}

type commitWaiter struct {
	mu    sync.Mutex
	want  int64
	ch    chan struct{}
	fired bool
}

func (w *commitWaiter) Begin(chain.BeginInfo)                         {}
func (w *commitWaiter) Advanced(string, int32, int, int64, time.Time) {}
func (w *commitWaiter) Committed(_ string, _ int32, off int64, _ string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off >= w.want && !w.fired {
		w.fired = true
		close(w.ch)
	}
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

// refusedBatchDeadLetters are two dead letters to dlq, a 200 kB one (above
// the topic's max.message.bytes of 100 kB, below the chain's dead-letter
// cap) and a small one, and the producer configuration that puts them in
// one batch: Flush.Messages = 2 (Flush.Frequency sends a message left
// alone). Both brokers refuse the batch as a whole: kfake and Kafka weigh
// the batch against max.message.bytes.
func refusedBatchDeadLetters(t *testing.T, b *testbroker.Broker) (dlq string, big, small chain.Message, cfg *sarama.Config) {
	t.Helper()
	dlq = topicWithMax(t, b, 100_000)
	reason := errors.New("undecodable")
	big = chain.DeadLetter(dlq, "click", &chain.Record{Topic: "input", Offset: 0, Value: bytes.Repeat([]byte("x"), 200_000)}, reason, chain.DefaultMaxDeadLetterBytes)
	small = chain.DeadLetter(dlq, "click", &chain.Record{Topic: "input", Offset: 1, Value: []byte("small")}, reason, chain.DefaultMaxDeadLetterBytes)
	cfg = b.Config()
	cfg.Producer.Flush.Messages = 2
	cfg.Producer.Flush.Frequency = 200 * time.Millisecond
	return dlq, big, small, cfg
}

// deadLetters reads dlq's records by the offset they dead-letter.
func deadLetters(t *testing.T, b *testbroker.Broker, dlq string, readCommitted bool) map[string][]*sarama.ConsumerMessage {
	t.Helper()
	out := map[string][]*sarama.ConsumerMessage{}
	for _, m := range b.ReadAll(t, dlq, readCommitted)[0] {
		for _, h := range m.Headers {
			if string(h.Key) == chain.HeaderDLQOffset {
				out[string(h.Value)] = append(out[string(h.Value)], m)
			}
		}
	}
	return out
}

func truncated(m *sarama.ConsumerMessage) bool {
	for _, h := range m.Headers {
		if string(h.Key) == chain.HeaderDLQTruncated {
			return true
		}
	}
	return false
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

// TestTransactorLearnsASizeLimitOnlyFromAMessageRefusedAlone: in
// exactly-once mode a 200 kB dead letter and a small one go out in one
// batch (Flush.Messages = 2) to a dead-letter topic whose max.message.bytes
// is 100 kB. The brokers refuse the batch; the Transactor must not take the
// small one's size for the topic's limit (the rewound cycle would then
// refuse even the minimal dead letter, and the partition fail at every
// restart): the rewound cycle sends them alone, learns the limit from the
// big one, and then writes its minimal dead letter and the small one whole.
// Once the topic's limit is raised and the learned one has expired, the
// next big dead letter is probed again and written whole, without a restart.
// Runs on kfake and on a real broker.
func TestTransactorLearnsASizeLimitOnlyFromAMessageRefusedAlone(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	dlq, _, _, cfg := refusedBatchDeadLetters(t, b)
	group := testbroker.Name(t, "group")
	huge := bytes.Repeat([]byte("x"), 200_000) // no separator: the decoder rejects it
	b.Produce(t, topic,
		&sarama.ProducerMessage{Value: sarama.StringEncoder("click|0")},
		&sarama.ProducerMessage{Value: sarama.ByteEncoder(huge)},
		&sarama.ProducerMessage{Value: sarama.StringEncoder("small")},
		&sarama.ProducerMessage{Value: sarama.StringEncoder("click|1")},
	)

	tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: b.Addrs(), TransactionalID: testbroker.Name(t, "txn"),
		Timeout: 5 * time.Second, Sarama: cfg, Logger: testLogger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Close()) }()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	kafka.SetTransactorClock(tx, func() time.Time { return time.Unix(0, clock.Load()) })

	noop := chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })
	w := &commitWaiter{want: 4, ch: make(chan struct{})}
	m := runMember(t, groupConfig(b, topic, group, t), func(*member) *chain.Chain {
		ch, err := chain.New([]chain.Stage{{Name: "click", Processor: noop}}, decoder,
			chainOptions(t, w, chain.WithExactlyOnce(tx), chain.WithDLQTopic(dlq))...)
		require.NoError(t, err)
		return ch
	})
	select {
	case <-w.ch:
	case <-m.done:
		t.Fatalf("Run ended before the commit past the dead letters: %v", m.err)
	case <-time.After(waitTimeout):
		t.Fatal("no commit past the dead letters")
	}

	// The topic's limit is raised; once the learned limit expires, a big
	// dead letter is sent whole.
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	raised := "1000000"
	require.NoError(t, admin.AlterConfig(sarama.TopicResource, dlq, map[string]*string{"max.message.bytes": &raised}, false))
	awaitTopicConfig(t, admin, dlq, "max.message.bytes", raised)
	clock.Add(int64(kafka.SizeProbeAfter()))
	w2 := &commitWaiter{want: 5, ch: make(chan struct{})}
	w.mu.Lock()
	w.want, w.ch, w.fired = w2.want, w2.ch, false
	w.mu.Unlock()
	b.Produce(t, topic, &sarama.ProducerMessage{Value: sarama.ByteEncoder(huge)})
	select {
	case <-w2.ch:
	case <-m.done:
		t.Fatalf("Run ended before the commit past the last dead letter: %v", m.err)
	case <-time.After(waitTimeout):
		t.Fatal("no commit past the last dead letter")
	}
	err, _ = m.stop(t)
	require.NoError(t, err)

	b.WaitStable(t, dlq)
	got := deadLetters(t, b, dlq, true)
	require.Len(t, got["2"], 1, "the small dead letter, once")
	require.False(t, truncated(got["2"][0]), "the small dead letter, whole")
	require.Len(t, got["1"], 1, "the big dead letter's minimal one, once")
	require.True(t, truncated(got["1"][0]))
	require.LessOrEqual(t, len(got["1"][0].Value), chain.MinDeadLetterBytes)
	require.Len(t, got["4"], 1, "the dead letter after the limit was raised, once")
	require.False(t, truncated(got["4"][0]), "written whole: the expired limit was probed again")
	require.Len(t, got["4"][0].Value, len(huge))
}

// awaitTopicConfig waits until the brokers describe topic's config name as
// value.
func awaitTopicConfig(t *testing.T, admin sarama.ClusterAdmin, topic, name, value string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{name}})
		require.NoError(t, err)
		for _, e := range entries {
			if e.Name == name && e.Value == value {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "topic %s: %s did not become %s", topic, name, value)
		time.Sleep(50 * time.Millisecond) // polling the brokers' state: no event to wait on
	}
}
