package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// readTopic returns every record of topic from each partition's log start
// to its high watermark at the time of the call, partition by partition in
// offset order. It is for topics written by idempotent, non-transactional
// producers (the engine's outputs and dead letters), whose offsets are
// contiguous, so reaching high watermark − 1 means the end.
func readTopic(ctx context.Context, client sarama.Client, topic string) ([]readRecord, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	defer func() { _ = consumer.Close() }()
	// Partitions are read concurrently (closing a partition consumer takes
	// about 100 ms), at most readConcurrency at a time.
	results := make([][]readRecord, len(parts))
	errs := make([]error, len(parts))
	sem := make(chan struct{}, readConcurrency)
	var wg sync.WaitGroup
	for i, p := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = readPartition(ctx, client, consumer, topic, p)
		})
	}
	wg.Wait()
	var out []readRecord
	for i, p := range parts {
		if errs[i] != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, p, errs[i])
		}
		out = append(out, results[i]...)
	}
	return out, nil
}

const readConcurrency = 16

func readPartition(ctx context.Context, client sarama.Client, consumer sarama.Consumer, topic string, p int32) ([]readRecord, error) {
	oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return nil, err
	}
	if end <= oldest {
		return nil, nil
	}
	pc, err := consumer.ConsumePartition(topic, p, oldest)
	if err != nil {
		return nil, err
	}
	defer func() { _ = pc.Close() }()
	out := make([]readRecord, 0, end-oldest)
	for {
		select {
		case m, ok := <-pc.Messages():
			if !ok {
				return nil, fmt.Errorf("partition consumer closed at %d of %d", len(out), end-oldest)
			}
			out = append(out, toReadRecord(m))
			if m.Offset >= end-1 {
				return out, nil
			}
		case e := <-pc.Errors():
			return nil, e.Err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func toReadRecord(m *sarama.ConsumerMessage) readRecord {
	r := readRecord{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: map[string]string{}}
	for _, h := range m.Headers {
		if h != nil {
			r.Headers[string(h.Key)] = string(h.Value)
		}
	}
	return r
}
