package kafka_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
)

// countingHandler counts the records logged with one message.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int32
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.msg, h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.msg, h.n}
}

// TestExactlyOnceStartWaitsOutACrashedOwnersTransaction: a previous owner
// of the group's partition crashed with a transaction open that holds
// offsets for it, so the group coordinator answers a RequireStable offset
// fetch with UNSTABLE_OFFSET_COMMIT until the transaction coordinator
// aborts it at its timeout. An exactly-once member started meanwhile must
// wait that out — not join the group again in a loop (every join a
// rebalance of the whole group), nor end Run — and then process the partition from the stable offsets: every record
// once. Runs on kfake and on a real broker.
func TestExactlyOnceStartWaitsOutACrashedOwnersTransaction(t *testing.T) {
	const txnTimeout = 3 * time.Second
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, 1, 40, 5)

	// The crashed owner: a transaction holding offsets of the group
	// (TxnOffsetCommit sent, EndTxn never), left for the transaction
	// coordinator to abort at its timeout.
	openCrashedTransaction(t, b, testbroker.Name(t, "crashed"), txnTimeout, group, topic, 0, 20)
	opened := time.Now()

	tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: b.Addrs(), TransactionalID: testbroker.Name(t, "txn"),
		Timeout: 5 * time.Second, Sarama: b.Config(), Logger: testLogger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Close()) }()
	l := newLedger(t, types, len(stageTypes))
	var rejoins atomic.Int32
	cfg := groupConfig(b, topic, group, t)
	cfg.Logger = slog.New(countingHandler{testLogger(t).Handler(), "consumer group session failed; joining again", &rejoins})
	m := runMember(t, cfg, func(m *member) *chain.Chain {
		ch, err := chain.New(l.stages(nil), decoder, chainOptions(t, l.observer(m), chain.WithExactlyOnce(tx))...)
		require.NoError(t, err)
		return ch
	})
	select {
	case <-l.done:
	case <-m.done:
		t.Fatalf("Run ended while the crashed owner's transaction was open: %v", m.err)
	case <-time.After(waitTimeout):
		t.Fatal("the partition was not processed to its end")
	}
	waited := time.Since(opened)
	err, _ = m.stop(t)
	require.NoError(t, err)
	l.checkExactlyOnce(types)
	// sarama's own initial offset fetch gives up after a few quick
	// retries and fails the first session; Run then waits until the
	// offsets are stable and joins once more.
	require.LessOrEqual(t, rejoins.Load(), int32(1), "the member waited for the transaction to end instead of joining again in a loop")
	t.Logf("processed to the end %v after the crashed owner's transaction opened (transaction timeout %v), %d failed session(s)", waited.Round(time.Millisecond), txnTimeout, rejoins.Load())
}

// openCrashedTransaction leaves open, as a crashed transactional producer
// does, a transaction that holds offset for group's topic/partition: the
// group coordinator keeps the offset pending (a RequireStable fetch gets
// UNSTABLE_OFFSET_COMMIT) until the transaction coordinator aborts the
// transaction at timeout. Raw requests: sarama's producer sends
// TxnOffsetCommit only when it commits.
func openCrashedTransaction(t *testing.T, b *testbroker.Broker, txnID string, timeout time.Duration, group, topic string, partition int32, offset int64) {
	t.Helper()
	cfg := b.Config()
	cfg.Version = sarama.V2_5_0_0
	client, err := sarama.NewClient(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	tcoord, err := client.TransactionCoordinator(txnID)
	require.NoError(t, err)
	ipr, err := tcoord.InitProducerID(&sarama.InitProducerIDRequest{Version: 3, TransactionalID: &txnID, TransactionTimeout: timeout, ProducerID: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	require.Equal(t, sarama.ErrNoError, ipr.Err)
	aor, err := tcoord.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 1, TransactionalID: txnID, ProducerID: ipr.ProducerID, ProducerEpoch: ipr.ProducerEpoch, GroupID: group})
	require.NoError(t, err)
	require.Equal(t, sarama.ErrNoError, aor.Err)
	gcoord, err := client.Coordinator(group)
	require.NoError(t, err)
	md := "crashed"
	tor, err := gcoord.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{Version: 2, TransactionalID: txnID, GroupID: group,
		ProducerID: ipr.ProducerID, ProducerEpoch: ipr.ProducerEpoch,
		Topics: map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: partition, Offset: offset, LeaderEpoch: -1, Metadata: &md}}}})
	require.NoError(t, err)
	for _, pe := range tor.Topics[topic] {
		require.Equal(t, sarama.ErrNoError, pe.Err)
	}
}
