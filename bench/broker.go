package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/cluster"
	"github.com/differential-dev/differential/internal/workload"
)

// CostHeader carries a record's simulated processing cost, in microseconds,
// from the input topic to the cost wrapper of both designs.
const CostHeader = "bench-cost-us"

// broker is the cluster every design of a run uses (internal/cluster: a
// real one, or an embedded one Run starts), with the benchmark's client
// settings and names.
type broker struct {
	*cluster.Cluster
}

func openBroker(brokers []string) (*broker, error) {
	c, err := cluster.Open(brokers, tune)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &broker{c}, nil
}

// tune sets the benchmark's client id and a fetch wait of 100 ms on
// cluster.Cluster.Config, the base configuration of every client of the
// harness and of both designs.
func tune(cfg *sarama.Config) {
	cfg.ClientID = "differential-bench"
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
}

// name returns a name unique to this run: topics, groups.
func (b *broker) name(kind string) string { return cluster.Name("bench-"+kind, "") }

// createTopic creates a topic with a fresh name and returns it once every
// partition has a leader.
func (b *broker) createTopic(kind string, partitions int) (string, error) {
	name := b.name(kind)
	if err := b.CreateTopic(name, int32(partitions)); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return name, nil
}

// deleteTopics deletes topics (errors are ignored: it only frees memory on
// the embedded broker and space on a real one).
func (b *broker) deleteTopics(names ...string) { _ = b.DeleteTopics(names...) }

// feeder writes workload records to an empty topic with workload.Writer:
// each to its workload partition and offset (checked), with its workload
// timestamp (the decoder's clock-skew rule reads it) and its cost header;
// it notes when each was handed to the producer.
type feeder struct {
	w *workload.Writer
	// sentAt[p][o] is the wall time (unix ns) record o of partition p was
	// handed to the producer.
	sentAt [][]atomic.Int64
}

func (b *broker) newFeeder(topic string, recs []workload.Record, partitions int) (*feeder, error) {
	cfg := b.Config()
	cfg.ClientID = "differential-bench-feeder"
	w, err := workload.NewWriter(workload.WriterConfig{Brokers: b.Addrs(), Sarama: cfg, Topic: topic, Exact: true, Headers: costHeader})
	if err != nil {
		return nil, fmt.Errorf("bench: feeder: %w", err)
	}
	f := &feeder{w: w, sentAt: make([][]atomic.Int64, partitions)}
	counts := make([]int, partitions)
	for i := range recs {
		counts[recs[i].Partition]++
	}
	for p := range f.sentAt {
		f.sentAt[p] = make([]atomic.Int64, counts[p])
	}
	return f, nil
}

func costHeader(r *workload.Record) []sarama.RecordHeader {
	return []sarama.RecordHeader{{Key: []byte(CostHeader), Value: strconv.AppendInt(nil, r.Cost.Microseconds(), 10)}}
}

func (f *feeder) send(ctx context.Context, r *workload.Record) error {
	f.sentAt[r.Partition][r.Offset].Store(time.Now().UnixNano())
	return f.w.Send(ctx, r)
}

// close flushes and waits for every acknowledgement.
func (f *feeder) close() error {
	_, err := f.w.Close()
	if err != nil {
		return fmt.Errorf("bench: feeding input: %w", err)
	}
	return nil
}

// produceAll writes every record as fast as the broker takes them.
func (b *broker) produceAll(topic string, recs []workload.Record, partitions int) error {
	f, err := b.newFeeder(topic, recs, partitions)
	if err != nil {
		return err
	}
	for i := range recs {
		if err := f.send(context.Background(), &recs[i]); err != nil {
			_ = f.close()
			return fmt.Errorf("bench: feeding input: %w", err)
		}
	}
	return f.close()
}

// pace writes recs[:warm] at once, waits for warmed (the consumer has
// completed them), then writes the rest in order at rate records/s (open
// loop: the schedule does not wait for the consumer) until all are sent or
// ctx ends, then flushes. It returns the feeder, whose sentAt the latency
// measurement reads.
func (b *broker) pace(ctx context.Context, topic string, recs []workload.Record, partitions int, rate float64, warm int, warmed func(context.Context) error) (*feeder, error) {
	f, err := b.newFeeder(topic, recs, partitions)
	if err != nil {
		return nil, err
	}
	for i := range recs[:warm] {
		if err := f.send(ctx, &recs[i]); err != nil {
			_ = f.close()
			return f, err
		}
	}
	if err := warmed(ctx); err != nil {
		_ = f.close()
		return f, err
	}
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	sent := warm
	for sent < len(recs) && ctx.Err() == nil {
		due := min(warm+int(time.Since(start).Seconds()*rate)+1, len(recs))
		for ; sent < due; sent++ {
			if err := f.send(ctx, &recs[sent]); err != nil {
				if ctx.Err() != nil {
					break
				}
				_ = f.close()
				return f, err
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	err = f.close()
	if err == nil && sent < len(recs) {
		err = fmt.Errorf("bench: feeding %s stopped after %d of %d records: %w", topic, sent, len(recs), ctx.Err())
	}
	return f, err
}
