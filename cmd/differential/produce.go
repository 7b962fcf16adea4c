package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/workload"
)

// producer writes generated records to a topic, in order, each to the
// partition the generator planned (the same as sarama's default hash
// partitioner for the same partition count), with the generated Kafka
// timestamp, which the decoder's clock-skew rule reads.
type producer struct {
	brokers []string
	sc      *sarama.Config
	topic   string
	// exact: the topic is fresh, so every record must land at its planned
	// offset (the demo verifies against the planned log).
	exact bool
	// progress, if set, is called about once a second with the records
	// acknowledged so far.
	progress func(acked int, elapsed time.Duration)
}

// produced is what a producer wrote.
type produced struct {
	records int
	// first and last offset written per partition
	first, last map[int32]int64
	took        time.Duration
}

// run sends recs and returns once every one is acknowledged (acks=all).
func (p *producer) run(ctx context.Context, recs []workload.Record) (produced, error) {
	sc := *p.sc
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Idempotent = true // retries neither duplicate nor reorder
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = max(sc.Producer.Retry.Max, 10)
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	ap, err := sarama.NewAsyncProducer(p.brokers, &sc)
	if err != nil {
		return produced{}, fmt.Errorf("producer for brokers %v: %w", p.brokers, err)
	}
	out := produced{first: map[int32]int64{}, last: map[int32]int64{}}
	start := time.Now()
	err = p.loop(ctx, ap, recs, &out, start)
	if err != nil {
		// Both channels must be drained, at once, until sarama closes them.
		ap.AsyncClose()
		var wg sync.WaitGroup
		wg.Go(func() {
			for range ap.Successes() {
			}
		})
		for range ap.Errors() {
		}
		wg.Wait()
		return out, err
	}
	if err := ap.Close(); err != nil {
		return out, fmt.Errorf("close producer: %w", err)
	}
	out.took = time.Since(start)
	return out, nil
}

func (p *producer) loop(ctx context.Context, ap sarama.AsyncProducer, recs []workload.Record, out *produced, start time.Time) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sent := 0
	var next *sarama.ProducerMessage
	for out.records < len(recs) {
		var in chan<- *sarama.ProducerMessage
		if sent < len(recs) {
			if next == nil {
				next = p.message(&recs[sent], sent)
			}
			in = ap.Input()
		}
		select {
		case in <- next:
			sent++
			next = nil
		case m := <-ap.Successes():
			if err := p.acked(m, recs, out); err != nil {
				return err
			}
		case pe := <-ap.Errors():
			return fmt.Errorf("produce to %s/%d: %w", p.topic, pe.Msg.Partition, pe.Err)
		case <-tick.C:
			if p.progress != nil {
				p.progress(out.records, time.Since(start))
			}
		case <-ctx.Done():
			return fmt.Errorf("interrupted after %d of %d records: %w", out.records, len(recs), ctx.Err())
		}
	}
	return nil
}

func (p *producer) message(r *workload.Record, i int) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{
		Topic: p.topic, Partition: r.Partition, Timestamp: r.Timestamp,
		Key: sarama.ByteEncoder(r.Key), Value: sarama.ByteEncoder(r.Value), Metadata: i,
	}
	return m
}

func (p *producer) acked(m *sarama.ProducerMessage, recs []workload.Record, out *produced) error {
	out.records++
	if f, ok := out.first[m.Partition]; !ok || m.Offset < f {
		out.first[m.Partition] = m.Offset
	}
	out.last[m.Partition] = max(out.last[m.Partition], m.Offset)
	if want := recs[m.Metadata.(int)].Offset; p.exact && m.Offset != want {
		return fmt.Errorf("record %d landed at %s/%d offset %d, planned %d: the topic was not empty", m.Metadata.(int), p.topic, m.Partition, m.Offset, want)
	}
	return nil
}
