package kfetch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// ReadTopic returns every record of every partition of topic, by partition,
// in offset order: from the log start to the end offset the partition's
// first fetch reports (the high watermark; for readCommitted the last
// stable offset, with aborted records left out). Control records are never
// returned. Partitions are read concurrently, on client's connections.
//
// sarama's consumer cannot be used for this: it does not expose its fetch
// position, so when a log ends in records it does not deliver (transaction
// markers, aborted records) a caller cannot tell "done" from "not yet"
// without waiting. Here the position is the fetch offset, so each read ends
// exactly at its end offset.
func ReadTopic(ctx context.Context, client sarama.Client, topic string, readCommitted bool) (map[int32][]*sarama.ConsumerMessage, error) {
	ps, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("kfetch: partitions of %s: %w", topic, err)
	}
	// Open the leaders' connections here, one goroutine: sarama's
	// Broker.Open marks a broker open before it takes the lock its dial
	// holds, so a concurrent first request can find it "not connected".
	for _, p := range ps {
		if b, err := client.Leader(topic, p); err == nil {
			_, _ = b.Connected() // waits for the dial
		}
	}
	out := make(map[int32][]*sarama.ConsumerMessage, len(ps))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			msgs, err := ReadPartition(ctx, client, topic, p, readCommitted)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("kfetch: read %s/%d: %w", topic, p, err))
				return
			}
			out[p] = msgs
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ReadPartition reads one partition as ReadTopic does.
func ReadPartition(ctx context.Context, client sarama.Client, topic string, partition int32, readCommitted bool) ([]*sarama.ConsumerMessage, error) {
	leader, err := client.Leader(topic, partition)
	if err != nil {
		return nil, err
	}
	offset, err := client.GetOffset(topic, partition, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	conf := *client.Config()
	conf.Consumer.MaxWaitTime = 50 * time.Millisecond
	conf.Consumer.Fetch.MaxBytes = 16 << 20
	conf.Consumer.IsolationLevel = sarama.ReadUncommitted
	if readCommitted {
		conf.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	f := Filter{ReadCommitted: readCommitted}
	var out []*sarama.ConsumerMessage
	end := int64(-1)
	for stalls := 0; end < 0 || offset < end; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp, err := leader.Fetch(NewRequest(&conf, topic, partition, offset, 8<<20))
		if err != nil {
			return nil, err
		}
		block, err := Block(resp, topic, partition)
		if err != nil {
			return nil, err
		}
		if end < 0 {
			end = End(block, readCommitted)
		}
		next, err := f.Records(block, offset, end, func(batch *sarama.RecordBatch, r *sarama.Record) {
			out = append(out, message(topic, partition, batch, r))
		})
		if err != nil {
			return nil, err
		}
		// A fetch below the end offset always returns at least one batch, so no progress
		// means something is wrong (for example a batch larger than the fetch size).
		if next == offset && offset < end {
			if stalls++; stalls == 3 {
				return nil, fmt.Errorf("fetch at offset %d (end %d) returns no records", offset, end)
			}
		}
		offset = next
	}
	return out, nil
}

func message(topic string, partition int32, batch *sarama.RecordBatch, r *sarama.Record) *sarama.ConsumerMessage {
	return &sarama.ConsumerMessage{
		Headers:        r.Headers,
		Timestamp:      Timestamp(batch, r),
		BlockTimestamp: batch.MaxTimestamp,
		Key:            r.Key,
		Value:          r.Value,
		Topic:          topic,
		Partition:      partition,
		Offset:         Offset(batch, r),
	}
}
