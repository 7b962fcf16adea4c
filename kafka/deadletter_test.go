package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
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
