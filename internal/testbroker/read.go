package testbroker

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/IBM/sarama"
)

// readPartition reads topic/partition from its log start to the end offset its first fetch
// reports, with plain fetch requests. sarama's consumer cannot be used for this: it does
// not expose its fetch position, so when the log ends in records it does not deliver
// (transaction markers, aborted records) a caller cannot tell "done" from "not yet"
// without waiting. Here the position is the fetch offset, so the loop ends exactly at the
// end offset. Aborted records are filtered as Kafka's consumers do (and as sarama does).
func readPartition(client sarama.Client, topic string, partition int32, readCommitted bool) ([]*sarama.ConsumerMessage, error) {
	leader, err := client.Leader(topic, partition)
	if err != nil {
		return nil, err
	}
	offset, err := client.GetOffset(topic, partition, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	f := partitionFilter{readCommitted: readCommitted, aborted: map[int64]bool{}}
	var out []*sarama.ConsumerMessage
	end := int64(-1)
	for stalls := 0; end < 0 || offset < end; {
		block, err := fetch(leader, topic, partition, offset, readCommitted)
		if err != nil {
			return nil, err
		}
		if end < 0 {
			end = block.HighWaterMarkOffset
			if readCommitted {
				end = block.LastStableOffset
			}
		}
		next, msgs, err := f.batches(topic, partition, offset, end, block)
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
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

func fetch(leader *sarama.Broker, topic string, partition int32, offset int64, readCommitted bool) (*sarama.FetchResponseBlock, error) {
	req := &sarama.FetchRequest{
		Version:      11,
		MaxWaitTime:  50,
		MinBytes:     1,
		MaxBytes:     16 << 20,
		SessionID:    0,
		SessionEpoch: -1, // no fetch session
	}
	if readCommitted {
		req.Isolation = sarama.ReadCommitted
	}
	req.AddBlock(topic, partition, offset, 8<<20, -1)
	resp, err := leader.Fetch(req)
	if err != nil {
		return nil, err
	}
	block := resp.GetBlock(topic, partition)
	if block == nil {
		return nil, sarama.ErrIncompleteResponse
	}
	if block.Err != sarama.ErrNoError {
		return nil, block.Err
	}
	return block, nil
}

// partitionFilter carries the aborted-transaction state of one partition across fetches.
type partitionFilter struct {
	readCommitted bool
	// aborted holds the producer ids whose current transaction was aborted: added when the
	// reader reaches the transaction's first offset, removed at its abort marker.
	aborted map[int64]bool
}

// batches turns one fetch response into messages in [offset, end) and returns the offset
// to fetch next.
func (f *partitionFilter) batches(topic string, partition int32, offset, end int64, block *sarama.FetchResponseBlock) (int64, []*sarama.ConsumerMessage, error) {
	abortedTxns := append([]*sarama.AbortedTransaction(nil), block.AbortedTransactions...)
	sort.Slice(abortedTxns, func(i, j int) bool { return abortedTxns[i].FirstOffset < abortedTxns[j].FirstOffset })
	var out []*sarama.ConsumerMessage
	for _, rs := range block.RecordsSet {
		batch := rs.RecordBatch
		if batch == nil {
			if rs.MsgSet != nil && len(rs.MsgSet.Messages) > 0 {
				return offset, nil, fmt.Errorf("legacy message sets are not supported")
			}
			continue
		}
		if batch.PartialTrailingRecord {
			break // the rest comes with the next fetch
		}
		last := batch.FirstOffset + int64(batch.LastOffsetDelta)
		for len(abortedTxns) > 0 && abortedTxns[0].FirstOffset <= last {
			f.aborted[abortedTxns[0].ProducerID] = true
			abortedTxns = abortedTxns[1:]
		}
		switch {
		case batch.Control:
			for _, r := range batch.Records {
				// A control record's key is version int16, type int16; type 0 is ABORT.
				if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0 {
					delete(f.aborted, batch.ProducerID)
				}
			}
		case f.readCommitted && batch.IsTransactional && f.aborted[batch.ProducerID]:
			// records of an aborted transaction
		default:
			for _, r := range batch.Records {
				o := batch.FirstOffset + r.OffsetDelta
				if o < offset || o >= end {
					continue // before the requested offset (batches start where they start) or past the end
				}
				out = append(out, message(topic, partition, batch, r))
			}
		}
		if last+1 > offset {
			offset = last + 1
		}
	}
	return offset, out, nil
}

func message(topic string, partition int32, batch *sarama.RecordBatch, r *sarama.Record) *sarama.ConsumerMessage {
	ts := batch.FirstTimestamp.Add(r.TimestampDelta)
	if batch.LogAppendTime {
		ts = batch.MaxTimestamp
	}
	return &sarama.ConsumerMessage{
		Headers:        r.Headers,
		Timestamp:      ts,
		BlockTimestamp: batch.MaxTimestamp,
		Key:            r.Key,
		Value:          r.Value,
		Topic:          topic,
		Partition:      partition,
		Offset:         batch.FirstOffset + r.OffsetDelta,
	}
}
