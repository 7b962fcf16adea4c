package testbroker_test

// These tests prove that the stack the engine builds on works the same on the embedded
// cluster and on a real Kafka (set DIFFERENTIAL_TEST_BROKERS): keyed produce and ordered
// reads, consumer-group commits with metadata that a restarted group resumes from,
// transactional visibility for read_committed readers, and producer fencing.
//
// They wait only on events (messages, handler callbacks, returned calls), each bounded by
// a timeout; none sleeps.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/kafka"
)

const waitTimeout = 30 * time.Second

func TestKeyedRecordsReadBackInOrderPerPartition(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 3)

	const users, perUser = 7, 9
	var msgs []*sarama.ProducerMessage
	for i := 0; i < users*perUser; i++ {
		user := fmt.Sprintf("u%d", i%users)
		msgs = append(msgs, &sarama.ProducerMessage{
			Key:   sarama.StringEncoder(user),
			Value: sarama.StringEncoder(fmt.Sprintf("%s#%d", user, i/users)),
		})
	}
	b.Produce(t, topic, msgs...)

	got := b.ReadAll(t, topic, false)
	total := 0
	partitionOf := map[string]int32{}
	nextSeq := map[string]int{}
	for p, ms := range got {
		total += len(ms)
		for i, m := range ms {
			require.Equal(t, int64(i), m.Offset, "partition %d is read densely from offset 0", p)
			user := string(m.Key)
			if q, ok := partitionOf[user]; ok {
				require.Equal(t, q, p, "all records of key %s are in one partition", user)
			}
			partitionOf[user] = p
			require.Equal(t, fmt.Sprintf("%s#%d", user, nextSeq[user]), string(m.Value), "records of a key keep their order")
			nextSeq[user]++
		}
	}
	require.Equal(t, users*perUser, total)
	for _, m := range msgs {
		require.Equal(t, m.Offset, got[m.Partition][m.Offset].Offset, "Produce reports where each record went")
	}

	// sarama's own consumer reads the same records in the same order.
	consumer, err := sarama.NewConsumer(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, consumer.Close()) }()
	for p, want := range got {
		read := consumePartition(t, consumer, topic, p, len(want))
		for i := range want {
			require.Equal(t, want[i].Offset, read[i].Offset)
			require.Equal(t, want[i].Key, read[i].Key)
			require.Equal(t, want[i].Value, read[i].Value)
		}
	}
}

func TestGroupResumesAtCommittedOffsetsWithMetadata(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 2)
	group := testbroker.Name(t, "group")
	for p := int32(0); p < 2; p++ {
		produceToPartition(t, b, topic, p, 10)
	}
	const committed = 3 // each partition commits offset 3: records 0..2 are done
	metadata := func(p int32) string { return fmt.Sprintf("dv1;click=%d;install=%d;p=%d", committed+2, committed, p) }

	cfg := b.Config()
	cfg.Consumer.Offsets.AutoCommit.Enable = false // only the handler's explicit commits count

	// First incarnation: mark and commit offset 3 with metadata on both partitions.
	first := &groupHandler{onMessage: make(chan *sarama.ConsumerMessage, 64)}
	first.process = func(sess sarama.ConsumerGroupSession, m *sarama.ConsumerMessage, _ bool) {
		if m.Offset < committed {
			sess.MarkOffset(m.Topic, m.Partition, m.Offset+1, metadata(m.Partition))
			if m.Offset == committed-1 {
				sess.Commit() // synchronous
				first.onMessage <- m
			}
		}
	}
	stop := runGroup(t, b, cfg, group, topic, first)
	donePartitions := map[int32]bool{}
	for len(donePartitions) < 2 {
		donePartitions[recv(t, first.onMessage, "first group commits").Partition] = true
	}
	stop()

	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	offsets, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	require.NoError(t, err)
	for p := int32(0); p < 2; p++ {
		block := offsets.GetBlock(topic, p)
		require.NotNil(t, block)
		require.Equal(t, sarama.ErrNoError, block.Err)
		require.Equal(t, int64(committed), block.Offset)
		require.Equal(t, metadata(p), block.Metadata)
	}

	// Second incarnation, same group id: every claim starts at the committed offset.
	second := &groupHandler{onMessage: make(chan *sarama.ConsumerMessage, 64), claims: make(chan map[string][]int32, 4)}
	second.process = func(_ sarama.ConsumerGroupSession, m *sarama.ConsumerMessage, firstOfClaim bool) {
		if firstOfClaim {
			second.onMessage <- m
		}
	}
	stop = runGroup(t, b, cfg, group, topic, second)
	require.Equal(t, []int32{0, 1}, sortedPartitions(recv(t, second.claims, "second group's assignment")[topic]))
	for i := 0; i < 2; i++ {
		m := recv(t, second.onMessage, "second group's first records")
		require.Equal(t, int64(committed), m.Offset, "partition %d resumes at its committed offset", m.Partition)
	}
	stop()

	// The metadata survived the new generation (the second group committed nothing).
	client, err := sarama.NewClient(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	require.NoError(t, err)
	defer func() { require.NoError(t, om.Close()) }()
	for p := int32(0); p < 2; p++ {
		pom, err := om.ManagePartition(topic, p)
		require.NoError(t, err)
		offset, meta := pom.NextOffset()
		require.Equal(t, int64(committed), offset)
		require.Equal(t, metadata(p), meta)
		// POM.Close blocks until the offset manager closes; release it asynchronously.
		pom.AsyncClose()
	}
}

func TestTransactionVisibleToReadCommittedOnlyAfterCommit(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	p := newTxnProducer(t, b, testbroker.Name(t, "txn"))

	require.NoError(t, p.BeginTxn())
	send(t, p, topic, "c1", "c2", "c3")
	// The transaction is open: the records are in the log but not below the last stable offset.
	require.Empty(t, b.ReadAll(t, topic, true)[0], "read_committed sees nothing of an open transaction")
	require.Equal(t, []string{"c1", "c2", "c3"}, values(b.ReadAll(t, topic, false)[0]))
	require.NoError(t, p.CommitTxn())

	require.NoError(t, p.BeginTxn())
	send(t, p, topic, "a1", "a2")
	require.NoError(t, p.AbortTxn())
	require.Equal(t, []string{"c1", "c2", "c3", "a1", "a2"}, values(b.ReadAll(t, topic, false)[0]),
		"read_uncommitted sees aborted records")

	require.NoError(t, p.BeginTxn())
	send(t, p, topic, "c4")
	require.NoError(t, p.CommitTxn())

	// A real broker answers EndTxn before it writes the markers, so visibility after a
	// commit is awaited with a blocking read, not asserted at once. c4 comes after the
	// aborted records: once it is read, everything before it has been decided.
	cfg := b.Config()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, consumer.Close()) }()
	require.Equal(t, []string{"c1", "c2", "c3", "c4"}, values(consumePartition(t, consumer, topic, 0, 4)))
	require.Equal(t, []string{"c1", "c2", "c3", "c4"}, values(b.ReadAll(t, topic, true)[0]),
		"ReadAll filters aborted records as sarama does")
}

func TestSecondTransactionalProducerFencesFirst(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	id := testbroker.Name(t, "txn")

	zombie := newTxnProducer(t, b, id)
	require.NoError(t, zombie.BeginTxn())
	send(t, zombie, topic, "zombie-1")

	// The new owner initializes the same transactional id: the epoch is bumped and the
	// zombie's open transaction is aborted.
	owner := newTxnProducer(t, b, id)

	_, _, err := zombie.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("zombie-2")})
	if err == nil {
		err = zombie.CommitTxn()
	}
	require.Error(t, err)
	t.Logf("fenced producer got: %v", err)
	require.True(t, kafka.IsFenced(err), "want a fenced error, got %v (%T)", err, err)
	require.Error(t, zombie.CommitTxn(), "a fenced producer can never commit")

	require.NoError(t, owner.BeginTxn())
	send(t, owner, topic, "owner-1")
	require.NoError(t, owner.CommitTxn())

	cfg := b.Config()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, consumer.Close()) }()
	require.Equal(t, []string{"owner-1"}, values(consumePartition(t, consumer, topic, 0, 1)))
	require.Equal(t, []string{"owner-1"}, values(b.ReadAll(t, topic, true)[0]))
}

// ---- helpers

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testutil.Recv(t, ch, waitTimeout, what)
}

// consumePartition reads n records of topic/p from the oldest offset with sarama's consumer.
func consumePartition(t *testing.T, c sarama.Consumer, topic string, p int32, n int) []*sarama.ConsumerMessage {
	t.Helper()
	pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
	require.NoError(t, err)
	defer func() { require.NoError(t, pc.Close()) }()
	var out []*sarama.ConsumerMessage
	for len(out) < n {
		select {
		case m := <-pc.Messages():
			out = append(out, m)
		case err := <-pc.Errors():
			t.Fatalf("consume %s/%d: %v", topic, p, err)
		case <-time.After(waitTimeout):
			t.Fatalf("consume %s/%d: %d of %d records after %s", topic, p, len(out), n, waitTimeout)
		}
	}
	return out
}

func produceToPartition(t *testing.T, b *testbroker.Broker, topic string, p int32, n int) {
	t.Helper()
	cfg := b.Config()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, prod.Close()) }()
	for i := 0; i < n; i++ {
		_, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(fmt.Sprint(i))})
		require.NoError(t, err)
	}
}

func newTxnProducer(t *testing.T, b *testbroker.Broker, id string) sarama.SyncProducer {
	t.Helper()
	cfg := b.Config()
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = id
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func send(t *testing.T, p sarama.SyncProducer, topic string, vals ...string) {
	t.Helper()
	for _, v := range vals {
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)})
		require.NoError(t, err)
	}
}

func values(ms []*sarama.ConsumerMessage) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}

func sortedPartitions(ps []int32) []int32 {
	out := append([]int32(nil), ps...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// groupHandler reports its assignment on claims (if set) and calls process for every
// record, from the claim's goroutine (sarama runs one per claimed partition, concurrently).
type groupHandler struct {
	claims    chan map[string][]int32
	onMessage chan *sarama.ConsumerMessage
	process   func(sess sarama.ConsumerGroupSession, m *sarama.ConsumerMessage, firstOfClaim bool)
}

func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	if h.claims != nil {
		h.claims <- sess.Claims()
	}
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for first := true; ; first = false {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.process(sess, m, first)
		case <-sess.Context().Done():
			return nil
		}
	}
}

// runGroup consumes topic as a member of group until the returned stop is called; stop
// waits for the member to leave and fails the test if consuming failed.
func runGroup(t *testing.T, b *testbroker.Broker, cfg *sarama.Config, group, topic string, h sarama.ConsumerGroupHandler) (stop func()) {
	t.Helper()
	g, err := sarama.NewConsumerGroup(b.Addrs(), group, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // Return.Errors is set: the channel must be drained; it closes with g
		for err := range g.Errors() {
			t.Errorf("consumer group %s: %v", group, err)
		}
	}()
	done := make(chan error, 1)
	go func() {
		var err error
		for ctx.Err() == nil && err == nil {
			err = g.Consume(ctx, []string{topic}, h)
		}
		done <- err
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		err := recv(t, done, "consumer group to stop")
		require.NoError(t, g.Close())
		if err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
			t.Fatalf("consume: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
