package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
)

// pollAll reads from p until it has n records.
func pollAll(t *testing.T, p chain.Poller, n int) []chain.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []chain.Record
	for len(out) < n {
		var err error
		out, err = p.Fetch(ctx, out)
		require.NoError(t, err, "after %d of %d records", len(out), n)
	}
	require.Len(t, out, n, "no record beyond the ones produced")
	return out
}

func newPollClient(t *testing.T, b *testbroker.Broker, readCommitted bool, fetchDefault int32) *pollClient {
	t.Helper()
	cfg := b.Config()
	cfg.Consumer.Fetch.Default = fetchDefault
	if readCommitted {
		cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	client, err := sarama.NewClient(b.Addrs(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return &pollClient{client: client, log: slog.New(slog.DiscardHandler)}
}

// TestPollerReadsFromAnyOffsetWithoutGaps: a follower's reader opened at
// any offset returns every record from there, in order, with its key,
// value, headers and timestamp — also when a batch is larger than the fetch
// size (the byte limit grows until it fits), in small caller batches, and
// when two readers of one partition run at once.
func TestPollerReadsFromAnyOffsetWithoutGaps(t *testing.T) {
	const n = 400
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	big := strings.Repeat("x", 2000)
	var msgs []*sarama.ProducerMessage
	for i := range n {
		msgs = append(msgs, &sarama.ProducerMessage{Partition: 0,
			Key: sarama.StringEncoder(fmt.Sprint("k", i)), Value: sarama.StringEncoder(fmt.Sprint(i, big)),
			Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte(fmt.Sprint(i))}}})
	}
	b.Produce(t, topic, msgs...)

	pc := newPollClient(t, b, false, 512) // smaller than one record
	for _, from := range []int64{0, 137, n - 1} {
		p, err := pc.open(topic, 0, from, 7)
		require.NoError(t, err)
		q, err := pc.open(topic, 0, from, 64)
		require.NoError(t, err)
		got, other := pollAll(t, p, n-int(from)), pollAll(t, q, n-int(from))
		for i, r := range got {
			o := from + int64(i)
			require.Equal(t, o, r.Offset)
			require.Equal(t, fmt.Sprint("k", o), string(r.Key))
			require.Equal(t, fmt.Sprint(o, big), string(r.Value))
			require.Equal(t, []chain.Header{{Key: []byte("h"), Value: []byte(fmt.Sprint(o))}}, r.Headers)
			require.False(t, r.Timestamp.IsZero())
			require.Equal(t, r.Offset, other[i].Offset)
		}
		require.NoError(t, p.Close())
		require.NoError(t, q.Close())
	}
}

// TestPollerHidesAbortedTransactionsAndMarkers: a read_committed reader
// returns the committed records and the plain ones, never an aborted
// transaction's records or a transaction marker, and steps over both; a
// read_uncommitted reader returns the aborted records too (and no marker).
func TestPollerHidesAbortedTransactionsAndMarkers(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	send := func(p sarama.SyncProducer, vals ...string) {
		for _, v := range vals {
			_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(v)})
			require.NoError(t, err)
		}
	}
	plain, err := sarama.NewSyncProducer(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { _ = plain.Close() }()
	cfg := b.Config()
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = testbroker.Name(t, "txn")
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	txn, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { _ = txn.Close() }()

	send(plain, "p1", "p2")
	require.NoError(t, txn.BeginTxn())
	send(txn, "a1", "a2", "a3")
	require.NoError(t, txn.AbortTxn())
	send(plain, "p3")
	require.NoError(t, txn.BeginTxn())
	send(txn, "c1", "c2")
	require.NoError(t, txn.CommitTxn())
	send(plain, "p4")

	values := func(rs []chain.Record) []string {
		var out []string
		for i, r := range rs {
			if i > 0 {
				require.Greater(t, r.Offset, rs[i-1].Offset)
			}
			out = append(out, string(r.Value))
		}
		return out
	}
	p, err := newPollClient(t, b, true, 1<<20).open(topic, 0, 0, 64)
	require.NoError(t, err)
	require.Equal(t, []string{"p1", "p2", "p3", "c1", "c2", "p4"}, values(pollAll(t, p, 6)))
	p, err = newPollClient(t, b, false, 1<<20).open(topic, 0, 0, 64)
	require.NoError(t, err)
	require.Equal(t, []string{"p1", "p2", "a1", "a2", "a3", "p3", "c1", "c2", "p4"}, values(pollAll(t, p, 9)))
}

// TestPollerOffsetOutOfRangeIsAnError: a reader at an offset the log does
// not hold fails with an error naming the partition and the offset, instead
// of waiting forever.
func TestPollerOffsetOutOfRangeIsAnError(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	b.Produce(t, topic, &sarama.ProducerMessage{Partition: 0, Value: sarama.StringEncoder("v")})
	p, err := newPollClient(t, b, false, 1<<20).open(topic, 0, 1000, 64)
	require.NoError(t, err)
	_, err = p.Fetch(context.Background(), nil)
	require.ErrorIs(t, err, errPollOutOfRange)
	require.Contains(t, err.Error(), fmt.Sprintf("%s/0 at 1000", topic))
}

// TestPollerBehindRetentionNamesTheLostRecords: a reader whose offset the
// log no longer holds (deleted by retention: here DeleteRecords) fails with
// an error naming the records it lost.
func TestPollerBehindRetentionNamesTheLostRecords(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	for range 10 {
		b.Produce(t, topic, &sarama.ProducerMessage{Partition: 0, Value: sarama.StringEncoder("v")})
	}
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	require.NoError(t, admin.DeleteRecords(topic, map[int32]int64{0: 6}))
	p, err := newPollClient(t, b, false, 1<<20).open(topic, 0, 2, 64)
	require.NoError(t, err)
	_, err = p.Fetch(context.Background(), nil)
	require.ErrorIs(t, err, errPollOutOfRange)
	require.Contains(t, err.Error(), fmt.Sprintf("%s/0 at 2", topic))
	require.Contains(t, err.Error(), "records 2 to 5 were deleted")
}
