package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kfetch"
)

// readTopic returns every record of topic from each partition's log start
// to its high watermark at the time of the call, partition by partition in
// offset order (kfetch.ReadTopic).
func readTopic(ctx context.Context, client sarama.Client, topic string) ([]readRecord, error) {
	byPartition, err := kfetch.ReadTopic(ctx, client, topic, false)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	return readRecords(byPartition), nil
}

// readRecords flattens records read by partition, partition by partition.
func readRecords(byPartition map[int32][]*sarama.ConsumerMessage) []readRecord {
	var out []readRecord
	for _, p := range slices.Sorted(maps.Keys(byPartition)) {
		for _, m := range byPartition[p] {
			out = append(out, toReadRecord(m))
		}
	}
	return out
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
