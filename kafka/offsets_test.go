package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
)

type fixedMember struct {
	gen int32
	id  string
}

func (m fixedMember) GenerationID() int32 { return m.gen }
func (m fixedMember) MemberID() string    { return m.id }

// TestCommitStoresOffsetAndMetadata: a commit returns once the coordinator
// stored it, the offset and metadata read back (through ClusterAdmin and
// through our own fetch), a new metadata at the same offset replaces the
// old one (sarama's MarkOffset would have dropped it), and a commit the
// broker refuses returns its error.
func TestCommitStoresOffsetAndMetadata(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 2)
	group := testbroker.Name(t, "group")
	client, err := sarama.NewClient(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	admin, err := sarama.NewClusterAdminFromClient(client)
	require.NoError(t, err)
	o := newOffsets(client, group)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A group that never committed: every partition at -1.
	got, err := o.fetch(ctx, topic, []int32{0, 1})
	require.NoError(t, err)
	require.Equal(t, map[int32]committed{0: {offset: -1}, 1: {offset: -1}}, got)

	readBack := func(p int32) (int64, string) {
		t.Helper()
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {p}})
		require.NoError(t, err)
		blk := resp.GetBlock(topic, p)
		require.NotNil(t, blk)
		require.Equal(t, sarama.ErrNoError, blk.Err)
		return blk.Offset, blk.Metadata
	}
	// No group member: commit as a non-member (generation -1).
	c0 := &partitionCommitter{o: o, topic: topic, partition: 0}
	require.NoError(t, c0.Commit(ctx, 5, "dfl1:first"))
	off, md := readBack(0)
	require.Equal(t, int64(5), off)
	require.Equal(t, "dfl1:first", md)

	require.NoError(t, c0.Commit(ctx, 5, "dfl1:second"))
	off, md = readBack(0)
	require.Equal(t, int64(5), off)
	require.Equal(t, "dfl1:second", md, "new metadata at the same offset is stored")

	c1 := &partitionCommitter{o: o, topic: topic, partition: 1}
	require.NoError(t, c1.Commit(ctx, 9, ""))
	got, err = o.fetch(ctx, topic, []int32{0, 1})
	require.NoError(t, err)
	require.Equal(t, map[int32]committed{0: {5, "dfl1:second"}, 1: {9, ""}}, got)

	// A member the coordinator does not know is refused, at once (no retry).
	stranger := &partitionCommitter{o: o, m: fixedMember{gen: 7, id: "nobody"}, topic: topic, partition: 0}
	start := time.Now()
	err = stranger.Commit(ctx, 6, "x")
	var cerr *CommitError
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, int32(0), cerr.Partition)
	require.True(t, errors.Is(err, sarama.ErrIllegalGeneration) || errors.Is(err, sarama.ErrUnknownMemberId), "got %v", err)
	require.Less(t, time.Since(start), 5*time.Second)
	off, md = readBack(0)
	require.Equal(t, int64(5), off, "the refused commit changed nothing")
	require.Equal(t, "dfl1:second", md)
}
