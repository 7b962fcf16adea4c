package microbatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

func TestMicroBatchCutKeepsTheGate(t *testing.T) {
	stages := attribution.Chain(attribution.DefaultConfig())
	ev := func(o int64, typ string, sec int) chain.Event {
		return chain.Event{Record: chain.Record{Offset: o}, Decoded: chain.Decoded{Type: typ, Time: time.Unix(int64(sec), 0)}}
	}
	m := New(Config{Stages: stages, IdleTimeout: time.Hour})
	now := time.Now()
	cases := []struct {
		name     string
		lateness time.Duration
		held     []chain.Event
		want     int
	}{
		{"install is the latest time: held", 0, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 2)}, 1},
		{"a later time releases it", 0, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 4)}, 3},
		{"lateness holds more", 2 * time.Second, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 4)}, 1},
		{"clicks only", 0, []chain.Event{ev(0, "click", 5), ev(1, "click", 4)}, 2},
		{"purchase is gated too", 0, []chain.Event{ev(0, "click", 1), ev(1, "purchase", 2)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m.lateness = tc.lateness
			p := &mbPartition{held: tc.held, lastArrival: now}
			require.Equal(t, tc.want, m.cut(p, now))
		})
	}
}

// TestCommitAndCheckpointModes runs the baseline over a small input in both
// of its commit and checkpoint modes: the micro-batch baseline's (one checkpoint per
// partition of a batch, synchronous commits on the group's client) and the
// strongest's (one synced checkpoint of all a batch's partitions,
// background commits on a client of its own). In both, once every record
// is complete and the run stopped, every partition's committed offset and
// persisted checkpoints are at its end, and the hooks counted what each
// mode promises: the strongest syncs once per batch.
func TestCommitAndCheckpointModes(t *testing.T) {
	b := testbroker.New(t)
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.MaxRecordBytes = 2000, 4, 16<<10
	recs := workload.Generate(wc)
	topic := b.Topic(t, int32(wc.Partitions))
	_, err := workload.Write(context.Background(), workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic, Exact: true}, recs)
	require.NoError(t, err)
	ends := make([]int64, wc.Partitions)
	for _, r := range recs {
		ends[r.Partition]++
	}
	for _, strong := range []bool{false, true} {
		t.Run(map[bool]string{false: "design6", true: "strongest"}[strong], func(t *testing.T) {
			cfg := attribution.DefaultConfig()
			cfg.MaxRecordBytes = 16 << 10
			st := store.NewMemory()
			out, dlq := b.Topic(t, 1), b.Topic(t, 1)
			prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: b.Config()})
			require.NoError(t, err)
			defer prod.Close()
			group := "mb-" + topic + map[bool]string{false: "-6", true: "-s"}[strong]
			var mu sync.Mutex
			next := map[int32]int64{}
			complete := make(chan struct{})
			var syncs, synced, commits int
			m := New(Config{
				Brokers: b.Addrs(), Sarama: b.Config(), Topic: topic, Group: group,
				Stages: attribution.Chain(cfg), Decoder: attribution.Decoder(cfg), Store: st, Producer: prod,
				OutputTopic: out, DLQTopic: dlq, Lateness: cfg.Lateness, IdleTimeout: 50 * time.Millisecond,
				BatchSize: 300, BatchLinger: 10 * time.Millisecond, Workers: 8,
				KeyOrder: strong, AsyncCommit: strong, GroupCheckpoint: strong,
				Checkpointed: func(parts []int32) {
					mu.Lock()
					syncs++
					synced += len(parts)
					mu.Unlock()
				},
				Committed: func(int) {
					mu.Lock()
					commits++
					mu.Unlock()
				},
				Progress: func(p int32, n int64) {
					mu.Lock()
					defer mu.Unlock()
					next[p] = n
					for q, e := range ends {
						if next[int32(q)] < e {
							return
						}
					}
					select {
					case <-complete:
					default:
						close(complete)
					}
				},
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			select {
			case <-complete:
			case err := <-done:
				t.Fatalf("run ended early: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("not complete after 2 minutes")
			}
			cancel()
			require.NoError(t, <-done)

			mu.Lock()
			defer mu.Unlock()
			batches := int(m.Batches())
			require.Positive(t, batches)
			require.Equal(t, int64(syncs), m.Syncs())
			require.Equal(t, int64(commits), m.Commits())
			if strong {
				require.Equal(t, batches, syncs, "one synced checkpoint per batch")
				require.Greater(t, synced, syncs, "a sync covers several partitions")
			} else {
				require.Equal(t, synced, syncs, "one sync per partition")
				require.Equal(t, batches, commits, "one synchronous commit per batch")
			}
			require.Positive(t, commits)

			admin, err := sarama.NewClusterAdminFromClient(mustClient(t, b))
			require.NoError(t, err)
			defer admin.Close()
			offs, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3}})
			require.NoError(t, err)
			for p, e := range ends {
				require.Equal(t, e, offs.GetBlock(topic, int32(p)).Offset, "partition %d committed", p)
				ps, err := st.OpenPartition(topic, int32(p), []string{"click", "install", "purchase"})
				require.NoError(t, err)
				cps, ok, err := ps.Checkpoints()
				require.NoError(t, err)
				require.True(t, ok)
				for _, cp := range cps {
					require.Equal(t, e, cp.Next, "partition %d stage %s checkpoint", p, cp.Stage)
				}
				require.NoError(t, ps.Close())
			}
		})
	}
}

func mustClient(t *testing.T, b *testbroker.Broker) sarama.Client {
	t.Helper()
	c, err := sarama.NewClient(b.Addrs(), b.Config())
	require.NoError(t, err)
	return c
}
