package workload_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/internal/workload"
)

// TestWriteLandsEveryRecordAtItsPlannedPlace: with Exact on a fresh topic,
// the topic read back is Split of the records — key, value, timestamp and
// the headers asked for, each at its planned partition and offset.
func TestWriteLandsEveryRecordAtItsPlannedPlace(t *testing.T) {
	b := testbroker.New(t)
	cfg := small()
	cfg.Records, cfg.Partitions = 3000, 3
	topic := b.Topic(t, int32(cfg.Partitions))
	recs := workload.Generate(cfg)
	cost := func(r *workload.Record) []sarama.RecordHeader {
		return []sarama.RecordHeader{{Key: []byte("cost"), Value: []byte(strconv.FormatInt(r.Cost.Microseconds(), 10))}}
	}
	out, err := workload.Write(context.Background(), workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic, Exact: true, Headers: cost}, recs)
	require.NoError(t, err)
	require.Equal(t, len(recs), out.Records)

	got := b.ReadAll(t, topic, false)
	parts := workload.Split(recs, cfg.Partitions)
	for p, want := range parts {
		require.Len(t, got[int32(p)], len(want), "partition %d", p)
		for i, w := range want {
			m := got[int32(p)][i]
			require.Equal(t, w.Offset, m.Offset)
			require.Equal(t, w.Key, m.Key)
			require.Equal(t, w.Value, m.Value)
			require.True(t, w.Timestamp.Equal(m.Timestamp), "partition %d offset %d timestamp", p, w.Offset)
			require.Len(t, m.Headers, 1)
			require.Equal(t, "cost", string(m.Headers[0].Key))
		}
	}

	// Writing the same records again: they land after the first copy, not
	// at their planned offsets.
	_, err = workload.Write(context.Background(), workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic, Exact: true}, recs)
	require.ErrorContains(t, err, "the topic was not empty")
	// Without Exact the topic may hold records already.
	out, err = workload.Write(context.Background(), workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic}, recs[:100])
	require.NoError(t, err)
	require.Equal(t, 100, out.Records)
}

func TestWriteStopsWithItsContext(t *testing.T) {
	b := testbroker.New(t)
	cfg := small()
	cfg.Records, cfg.Partitions = 500, 2
	topic := b.Topic(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := workload.Write(ctx, workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic}, workload.Generate(cfg))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "interrupted after")
}

// TestCloseWaitsForRetries: a real broker answers NOT_LEADER_OR_FOLLOWER to
// the first produce requests of a topic created a moment before; sarama
// retries them, and Close must not close the producer while it does (it
// would fail the retried records: "producer in process of shutting down").
// Here the embedded broker refuses the first three produce requests that
// way.
func TestCloseWaitsForRetries(t *testing.T) {
	c, err := embedded.Start(embedded.Topic("t", 2))
	require.NoError(t, err)
	defer c.Close()
	refused := testutil.Refuse(c.Fake(), kmsg.Produce, 3, func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	})
	cfg := small()
	cfg.Records, cfg.Partitions = 20, 2
	recs := workload.Generate(cfg)
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	out, err := workload.Write(context.Background(), workload.WriterConfig{Brokers: c.Addrs(), Sarama: sc, Topic: "t", Exact: true}, recs)
	require.Equal(t, 3, refused(), "the first produce requests were refused")
	require.NoError(t, err)
	require.Equal(t, len(recs), out.Records)
}
