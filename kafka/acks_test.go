package kafka

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"
	"github.com/stretchr/testify/require"
)

// TestAckedProducer: every message handed over is acknowledged through the
// readers, or failed; close waits for them and is idempotent; sends after
// close, or after their context ended, say which message was not handed
// over and why.
func TestAckedProducer(t *testing.T) {
	sc := mocks.NewTestConfig()
	sc.Producer.Return.Successes = true
	mp := mocks.NewAsyncProducer(t, sc)
	mp.ExpectInputAndSucceed()
	mp.ExpectInputAndFail(sarama.ErrOutOfBrokers)
	var mu sync.Mutex
	var acked, failed []string
	a := newAckedProducer(mp, func(m *sarama.ProducerMessage) {
		mu.Lock()
		defer mu.Unlock()
		acked = append(acked, m.Metadata.(string))
	}, func(pe *sarama.ProducerError) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, pe.Msg.Metadata.(string))
	})
	names := []string{"first", "second"}
	n, err := a.sendAll(context.Background(), 2, func(i int) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: "t", Metadata: names[i]}
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err = a.sendAll(ctx, 1, func(int) *sarama.ProducerMessage { t.Fatal("built after its context ended"); return nil })
	require.Equal(t, 0, n)
	require.ErrorIs(t, err, errNotHandedOver)
	require.ErrorIs(t, err, context.Canceled)

	require.True(t, a.close())
	require.Equal(t, []string{"first"}, acked, "close returns after the readers saw every result")
	require.Equal(t, []string{"second"}, failed)
	require.False(t, a.close())
	_, err = a.sendAll(context.Background(), 1, func(int) *sarama.ProducerMessage { return &sarama.ProducerMessage{Topic: "t"} })
	require.True(t, errors.Is(err, ErrProducerClosed))
}

// TestNeedBrokers names the configuration whose Brokers is empty.
func TestNeedBrokers(t *testing.T) {
	require.NoError(t, needBrokers("ProducerConfig", []string{"h:1"}))
	require.EqualError(t, needBrokers("ChangelogConfig", nil),
		"kafka: ChangelogConfig.Brokers is empty: name at least one bootstrap broker as host:port")
}
