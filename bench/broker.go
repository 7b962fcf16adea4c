package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/internal/workload"
)

// CostHeader carries a record's simulated processing cost, in microseconds,
// from the input topic to the cost wrapper of both designs.
const CostHeader = "bench-cost-us"

// cluster is the broker every design of a run uses, and the names it hands out.
type cluster struct {
	addrs    []string
	embedded *embedded.Cluster // nil on a real cluster
	runID    string
	seq      atomic.Int64

	mu     sync.Mutex
	topics []string // created and not yet deleted
}

func openCluster(brokers []string) (*cluster, error) {
	c := &cluster{runID: strconv.FormatInt(time.Now().UnixNano()&0xffffffff, 16)}
	if len(brokers) > 0 {
		c.addrs = brokers
		return c, nil
	}
	e, err := embedded.Start()
	if err != nil {
		return nil, fmt.Errorf("bench: embedded broker: %w", err)
	}
	c.embedded, c.addrs = e, e.Addrs()
	return c, nil
}

func (c *cluster) close() {
	c.mu.Lock()
	left := c.topics
	c.topics = nil
	c.mu.Unlock()
	if len(left) > 0 {
		c.deleteTopics(left...)
	}
	if c.embedded != nil {
		c.embedded.Close()
	}
}

// name returns a name unique to this run: topics, groups.
func (c *cluster) name(kind string) string {
	return fmt.Sprintf("bench-%s-%s-%d", kind, c.runID, c.seq.Add(1))
}

// config is the sarama base configuration of every client of the harness
// and of both designs: protocol 3.0 (kfake and Kafka 4 accept it), short
// fetch waits, consumers from the oldest offset.
func (c *cluster) config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "differential-bench"
	cfg.Version = sarama.V3_0_0_0
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

// createTopic creates a topic with a fresh name and returns it once every
// partition has a leader.
func (c *cluster) createTopic(kind string, partitions int) (string, error) {
	name := c.name(kind)
	admin, err := sarama.NewClusterAdmin(c.addrs, c.config())
	if err != nil {
		return "", fmt.Errorf("bench: admin: %w", err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(name, kadmin.NewTopic(int32(partitions)), false); err != nil {
		return "", fmt.Errorf("bench: create topic %s: %w", name, err)
	}
	c.mu.Lock()
	c.topics = append(c.topics, name)
	c.mu.Unlock()
	// A real broker answers CreateTopics before every broker serves the topic.
	if err := kadmin.AwaitLeaders(c.addrs, c.config(), name, int32(partitions), 30*time.Second); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return name, nil
}

// deleteTopics deletes topics (errors are ignored: it only frees memory on
// the embedded broker and space on a real one).
func (c *cluster) deleteTopics(names ...string) {
	admin, err := sarama.NewClusterAdmin(c.addrs, c.config())
	if err != nil {
		return
	}
	defer admin.Close()
	for _, n := range names {
		_ = admin.DeleteTopic(n)
	}
	c.mu.Lock()
	kept := c.topics[:0]
	for _, t := range c.topics {
		deleted := false
		for _, n := range names {
			deleted = deleted || n == t
		}
		if !deleted {
			kept = append(kept, t)
		}
	}
	c.topics = kept
	c.mu.Unlock()
}

// feeder writes workload records to a topic: each to its workload partition
// (manual partitioner), in order, with its workload timestamp (the decoder's
// clock-skew rule reads it) and its cost header, idempotently so every
// record lands at its workload offset, which is checked.
type feeder struct {
	ap    sarama.AsyncProducer
	topic string
	// sentAt[p][o] is the wall time (unix ns) record o of partition p was
	// handed to the producer.
	sentAt [][]atomic.Int64
	acked  atomic.Int64

	mu  sync.Mutex
	err error
	wg  sync.WaitGroup
}

func (c *cluster) newFeeder(topic string, recs []workload.Record, partitions int) (*feeder, error) {
	cfg := c.config()
	cfg.ClientID = "differential-bench-feeder"
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Errors = true
	ap, err := sarama.NewAsyncProducer(c.addrs, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: feeder: %w", err)
	}
	f := &feeder{ap: ap, topic: topic, sentAt: make([][]atomic.Int64, partitions)}
	counts := make([]int, partitions)
	for i := range recs {
		counts[recs[i].Partition]++
	}
	for p := range f.sentAt {
		f.sentAt[p] = make([]atomic.Int64, counts[p])
	}
	f.wg.Go(func() {
		for m := range ap.Successes() {
			want := m.Metadata.(int64)
			if m.Offset != want {
				f.fail(fmt.Errorf("bench: input record %d/%d landed at offset %d (the topic was not empty?)", m.Partition, want, m.Offset))
			}
			f.acked.Add(1)
		}
	})
	f.wg.Go(func() {
		for pe := range ap.Errors() {
			f.fail(fmt.Errorf("bench: produce input to %s: %w", topic, pe.Err))
		}
	})
	return f, nil
}

func (f *feeder) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *feeder) send(r *workload.Record) {
	pm := &sarama.ProducerMessage{
		Topic:     f.topic,
		Partition: r.Partition,
		Key:       sarama.ByteEncoder(r.Key),
		Value:     sarama.ByteEncoder(r.Value),
		Timestamp: r.Timestamp,
		Metadata:  r.Offset,
		Headers: []sarama.RecordHeader{{
			Key:   []byte(CostHeader),
			Value: strconv.AppendInt(nil, r.Cost.Microseconds(), 10),
		}},
	}
	f.sentAt[r.Partition][r.Offset].Store(time.Now().UnixNano())
	f.ap.Input() <- pm
}

// close flushes and waits for every acknowledgement.
func (f *feeder) close() error {
	f.ap.AsyncClose()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// produceAll writes every record as fast as the broker takes them.
func (c *cluster) produceAll(topic string, recs []workload.Record, partitions int) error {
	f, err := c.newFeeder(topic, recs, partitions)
	if err != nil {
		return err
	}
	for i := range recs {
		f.send(&recs[i])
	}
	if err := f.close(); err != nil {
		return err
	}
	if n := f.acked.Load(); n != int64(len(recs)) {
		return fmt.Errorf("bench: %d of %d input records acknowledged", n, len(recs))
	}
	return nil
}

// pace writes recs[:warm] at once, waits for warmed (the consumer has
// completed them), then writes the rest in order at rate records/s (open
// loop: the schedule does not wait for the consumer) until all are sent or
// ctx ends, then flushes. It returns the feeder, whose sentAt the latency
// measurement reads.
func (c *cluster) pace(ctx context.Context, topic string, recs []workload.Record, partitions int, rate float64, warm int, warmed func(context.Context) error) (*feeder, error) {
	f, err := c.newFeeder(topic, recs, partitions)
	if err != nil {
		return nil, err
	}
	for i := range recs[:warm] {
		f.send(&recs[i])
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
			f.send(&recs[sent])
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

// readTopic returns every record of every partition of topic, from the log
// start to the high watermark read first (kfetch.ReadTopic).
func (c *cluster) readTopic(topic string) (map[int32][]*sarama.ConsumerMessage, error) {
	client, err := sarama.NewClient(c.addrs, c.config())
	if err != nil {
		return nil, fmt.Errorf("bench: read %s: %w", topic, err)
	}
	defer client.Close()
	return kfetch.ReadTopic(context.Background(), client, topic, false)
}
