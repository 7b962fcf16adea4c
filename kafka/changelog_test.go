package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
)

func newChangelog(t *testing.T, b *testbroker.Broker, input, group, topic string) (*kafka.Changelog, error) {
	t.Helper()
	cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{
		Brokers: b.Addrs(), InputTopic: input, Group: group, Topic: topic, Sarama: b.Config(),
	})
	if err == nil {
		t.Cleanup(func() { require.NoError(t, cl.Close()) })
		if b.Real() {
			t.Cleanup(func() { deleteTopic(t, b, cl.Topic()) })
		}
	}
	return cl, err
}

func deleteTopic(t testing.TB, b *testbroker.Broker, topic string) {
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	if err != nil {
		t.Logf("delete %s: %v", topic, err)
		return
	}
	defer admin.Close()
	_ = admin.DeleteTopic(topic)
}

func describeTopic(t *testing.T, b *testbroker.Broker, topic string) (partitions int, policy, lag string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer admin.Close()
	md, err := admin.DescribeTopics([]string{topic})
	require.NoError(t, err)
	require.Len(t, md, 1)
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy", "min.compaction.lag.ms"}})
	require.NoError(t, err)
	for _, e := range entries {
		switch e.Name {
		case "cleanup.policy":
			policy = e.Value
		case "min.compaction.lag.ms":
			lag = e.Value
		}
	}
	return len(md[0].Partitions), policy, lag
}

func TestChangelogTopicIsCreatedAndChecked(t *testing.T) {
	b := testbroker.New(t)
	input := b.Topic(t, 3)
	group := testbroker.Name(t, "g")

	cl, err := newChangelog(t, b, input, group, "")
	require.NoError(t, err)
	assert.Equal(t, group+"."+input+".state", cl.Topic())
	n, policy, lag := describeTopic(t, b, cl.Topic())
	assert.Equal(t, 3, n, "the input's partition count")
	assert.Equal(t, "compact", policy)
	assert.Equal(t, "3600000", lag, "records no commit covers cannot make committed ones compacted away before a restore")
	assert.Equal(t, 24*time.Hour, cl.TombstoneRetention(), "delete.retention.ms, Kafka's default")

	// Present and fitting: accepted as it is.
	again, err := newChangelog(t, b, input, group, "")
	require.NoError(t, err)
	assert.Equal(t, int32(3), again.Partitions())

	// Present and not fitting: a clear error, nothing changed.
	tooMany := b.Topic(t, 4)
	_, err = newChangelog(t, b, input, group, tooMany)
	require.ErrorIs(t, err, kafka.ErrChangelogMismatch)
	assert.Contains(t, err.Error(), "has 4 partitions, the input topic")
	// Fewer partitions would be grown, but not a topic that is refused
	// anyway: it is left as it is.
	wrongCount := b.Topic(t, 2) // cleanup.policy=delete, the default
	_, err = newChangelog(t, b, input, group, wrongCount)
	require.ErrorIs(t, err, kafka.ErrChangelogMismatch)
	assert.Contains(t, err.Error(), "cleanup.policy")
	n, _, _ = describeTopic(t, b, wrongCount)
	assert.Equal(t, 2, n, "a refused topic is not grown")

	deleting := b.Topic(t, 3) // cleanup.policy=delete, the default
	_, err = newChangelog(t, b, input, group, deleting)
	require.ErrorIs(t, err, kafka.ErrChangelogMismatch)
	assert.Contains(t, err.Error(), "cleanup.policy")

	_, err = newChangelog(t, b, "no-such-input-"+group, group, "")
	require.ErrorIs(t, err, kafka.ErrUnknownTopic)

	restore := kafka.SetGrowMetadataWait(200 * time.Millisecond)
	_, err = cl.Partition(input, 3)
	restore()
	require.ErrorIs(t, err, kafka.ErrChangelogMismatch, "a partition the input does not have has no changelog partition")
	_, err = cl.Partition("other", 0)
	require.Error(t, err)
}

// Partitions added to the input get their changelog partitions: when a
// running engine first asks for one (Partition), and when an engine starts
// on a changelog with fewer partitions than the input. The new changelog
// partitions take appends at once (the producer learns of them) and the
// old ones keep their records.
func TestChangelogGrowsWithTheInput(t *testing.T) {
	b := testbroker.New(t)
	input := b.Topic(t, 2)
	group := testbroker.Name(t, "g")
	cl, err := newChangelog(t, b, input, group, "")
	require.NoError(t, err)
	ctx := context.Background()
	p1, err := cl.Partition(input, 1)
	require.NoError(t, err)
	_, err = p1.Append(ctx, []chain.ChangelogRecord{{Key: []byte("k1"), Value: []byte("v1")}})
	require.NoError(t, err)

	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.CreatePartitions(input, 3, nil, false))
	p2, err := cl.Partition(input, 2) // claimed while running
	require.NoError(t, err)
	assert.Equal(t, int32(3), cl.Partitions())
	n, policy, _ := describeTopic(t, b, cl.Topic())
	assert.Equal(t, 3, n)
	assert.Equal(t, "compact", policy)
	end, err := p2.Append(ctx, []chain.ChangelogRecord{{Key: []byte("k2"), Value: []byte("v2")}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), end)
	end, err = p1.End(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), end, "the old partition keeps its records")
	restore := kafka.SetGrowMetadataWait(200 * time.Millisecond)
	_, err = cl.Partition(input, 3)
	restore()
	require.ErrorIs(t, err, kafka.ErrChangelogMismatch, "the input has no partition 3")

	// Grown while no engine ran: the next start grows the changelog. (A
	// real broker lists the new partitions a moment after CreatePartitions
	// returns; the start reads the count the brokers list.)
	require.NoError(t, admin.CreatePartitions(input, 5, nil, false))
	require.NoError(t, kadmin.AwaitLeaders(b.Addrs(), b.Config(), input, 5, 30*time.Second))
	again, err := newChangelog(t, b, input, group, "")
	require.NoError(t, err)
	assert.Equal(t, int32(5), again.Partitions())
	n, _, _ = describeTopic(t, b, cl.Topic())
	assert.Equal(t, 5, n)
	// The first instance, told of partition 4 later, finds it grown.
	p4, err := cl.Partition(input, 4)
	require.NoError(t, err)
	_, err = p4.Append(ctx, []chain.ChangelogRecord{{Key: []byte("k4"), Value: []byte("v4")}})
	require.NoError(t, err)
}

func TestChangelogAppendReadEnd(t *testing.T) {
	b := testbroker.New(t)
	input := b.Topic(t, 2)
	cl, err := newChangelog(t, b, input, testbroker.Name(t, "g"), "")
	require.NoError(t, err)
	ctx := context.Background()
	p1, err := cl.Partition(input, 1)
	require.NoError(t, err)
	defer p1.Close()

	end, err := p1.End(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), end)

	var recs []chain.ChangelogRecord
	for i := range 2500 {
		r := chain.ChangelogRecord{Key: []byte(fmt.Sprintf("k%d", i%700))}
		if i%7 != 3 {
			r.Value = []byte(fmt.Sprintf("v%d", i))
		}
		recs = append(recs, r)
	}
	end, err = p1.Append(ctx, recs[:1000])
	require.NoError(t, err)
	assert.Equal(t, int64(1000), end, "the offset after the last record")
	end, err = p1.Append(ctx, recs[1000:])
	require.NoError(t, err)
	assert.Equal(t, int64(2500), end)
	got, err := p1.End(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2500), got)

	p0, err := cl.Partition(input, 0)
	require.NoError(t, err)
	end0, err := p0.End(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), end0, "records go to the input partition's changelog partition only")

	// Read returns exactly [from, to), tombstones as nil values.
	var read []chain.ChangelogRecord
	require.NoError(t, p1.Read(ctx, 10, 2017, func(rs []chain.ChangelogRecord) error {
		for _, r := range rs {
			read = append(read, chain.ChangelogRecord{Offset: r.Offset, Key: append([]byte(nil), r.Key...), Value: clone(r.Value)})
		}
		return nil
	}))
	require.Len(t, read, 2007)
	for i, r := range read {
		want := recs[10+i]
		require.Equal(t, int64(10+i), r.Offset)
		require.Equal(t, string(want.Key), string(r.Key))
		require.Equal(t, want.Value == nil, r.Value == nil, "offset %d tombstone", r.Offset)
		require.Equal(t, string(want.Value), string(r.Value))
	}
	require.NoError(t, p1.Read(ctx, 5, 5, func([]chain.ChangelogRecord) error { t.Fatal("empty range"); return nil }))

	// Reading past the end is an error, not a wait.
	err = p1.Read(ctx, 2400, 2600, func([]chain.ChangelogRecord) error { return nil })
	require.Error(t, err)

	// An error from fn stops the read.
	stop := fmt.Errorf("stop")
	require.ErrorIs(t, p1.Read(ctx, 0, 2500, func([]chain.ChangelogRecord) error { return stop }), stop)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
