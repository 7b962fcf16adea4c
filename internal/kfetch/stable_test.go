package kfetch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/internal/testbroker"
)

// TestWaitStableWaitsForTheOpenTransaction: while a transaction holds
// records of the topic, WaitStable keeps waiting (here until its context
// ends) and a read_committed ReadTopic ends before them; once the
// transaction committed, WaitStable returns and ReadTopic returns them.
func TestWaitStableWaitsForTheOpenTransaction(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	b.Produce(t, topic, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("plain")})

	cfg := *b.Config()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = testbroker.Name(t, "txn")
	p, err := sarama.NewSyncProducer(b.Addrs(), &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.NoError(t, p.BeginTxn())
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("in the transaction")})
	require.NoError(t, err)

	client, err := sarama.NewClient(b.Addrs(), b.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = kfetch.WaitStable(ctx, client, topic)
	cancel()
	require.Error(t, err, "a transaction is open")
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	got, err := kfetch.ReadTopic(context.Background(), client, topic, true)
	require.NoError(t, err)
	require.Len(t, got[0], 1, "read_committed ends at the open transaction")

	require.NoError(t, p.CommitTxn())
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, kfetch.WaitStable(ctx, client, topic))
	got, err = kfetch.ReadTopic(ctx, client, topic, true)
	require.NoError(t, err)
	require.Len(t, got[0], 2)
	require.Equal(t, "in the transaction", string(got[0][1].Value))
}
