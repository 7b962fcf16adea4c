package testbroker

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kfetch"
)

// readPartition reads topic/partition from its log start to the end offset its first fetch
// reports, with plain fetch requests. sarama's consumer cannot be used for this: it does
// not expose its fetch position, so when the log ends in records it does not deliver
// (transaction markers, aborted records) a caller cannot tell "done" from "not yet"
// without waiting. Here the position is the fetch offset, so the loop ends exactly at the
// end offset. Aborted records are filtered as Kafka's consumers do (kfetch).
func readPartition(client sarama.Client, topic string, partition int32, readCommitted bool) ([]*sarama.ConsumerMessage, error) {
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
	f := kfetch.Filter{ReadCommitted: readCommitted}
	var out []*sarama.ConsumerMessage
	end := int64(-1)
	for stalls := 0; end < 0 || offset < end; {
		resp, err := leader.Fetch(kfetch.NewRequest(&conf, topic, partition, offset, 8<<20))
		if err != nil {
			return nil, err
		}
		block, err := kfetch.Block(resp, topic, partition)
		if err != nil {
			return nil, err
		}
		if end < 0 {
			end = kfetch.End(block, readCommitted)
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
		Timestamp:      kfetch.Timestamp(batch, r),
		BlockTimestamp: batch.MaxTimestamp,
		Key:            r.Key,
		Value:          r.Value,
		Topic:          topic,
		Partition:      partition,
		Offset:         kfetch.Offset(batch, r),
	}
}
