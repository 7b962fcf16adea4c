// Package kfetch reads a partition with plain Fetch requests: the request a
// consumer sends for one partition at one offset, and the filtering a
// consumer applies to the response — control records (transaction markers)
// dropped, records of aborted transactions dropped under read_committed,
// compaction gaps and whole aborted batches stepped over, a partial trailing
// batch left for the next fetch. sarama's consumer does the same inside its
// PartitionConsumer but exposes neither its position nor a way to seek; the
// Kafka adapter's polling followers need both, and ReadTopic — used by the
// test broker, the benchmark and the CLI demo to read a topic back to its
// end — needs the position to know where the end is.
package kfetch

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// NewRequest is a Fetch request for topic/partition at offset, with at most
// partitionMaxBytes from the partition, in the protocol version sarama's
// consumer would use for conf.Version, and conf's wait, sizes and isolation
// level. It opens no fetch session.
func NewRequest(conf *sarama.Config, topic string, partition int32, offset int64, partitionMaxBytes int32) *sarama.FetchRequest {
	req := &sarama.FetchRequest{
		Version:     Version(conf.Version),
		MinBytes:    conf.Consumer.Fetch.Min,
		MaxWaitTime: int32(conf.Consumer.MaxWaitTime / time.Millisecond),
	}
	if req.Version >= 3 {
		req.MaxBytes = conf.Consumer.Fetch.MaxBytes
	}
	if req.Version >= 4 {
		req.Isolation = conf.Consumer.IsolationLevel
	}
	if req.Version >= 7 {
		req.SessionID, req.SessionEpoch = 0, -1 // no fetch session
	}
	req.AddBlock(topic, partition, offset, partitionMaxBytes, -1)
	return req
}

// Version is the Fetch request version sarama's consumer uses for protocol
// version v.
func Version(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 12
	case v.IsAtLeast(sarama.V2_3_0_0):
		return 11
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 10
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 8
	case v.IsAtLeast(sarama.V1_1_0_0):
		return 7
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 6
	case v.IsAtLeast(sarama.V0_11_0_0):
		return 5
	case v.IsAtLeast(sarama.V0_10_1_0):
		return 3
	case v.IsAtLeast(sarama.V0_10_0_0):
		return 2
	case v.IsAtLeast(sarama.V0_9_0_0):
		return 1
	}
	return 0
}

// Block is the response's block for topic/partition, or the error the
// broker answered for it.
func Block(resp *sarama.FetchResponse, topic string, partition int32) (*sarama.FetchResponseBlock, error) {
	block := resp.GetBlock(topic, partition)
	if block == nil {
		return nil, sarama.ErrIncompleteResponse
	}
	if block.Err != sarama.ErrNoError {
		return nil, block.Err
	}
	return block, nil
}

// End is the offset a reader at the given isolation level can read up to
// (exclusive): the high watermark, or under read_committed the last stable
// offset.
func End(block *sarama.FetchResponseBlock, readCommitted bool) int64 {
	if readCommitted && block.LastStableOffset >= 0 {
		return block.LastStableOffset
	}
	return block.HighWaterMarkOffset
}

// ErrLegacyFormat: the partition holds message sets of the pre-0.11 formats
// (v0/v1), which Kafka 4 no longer writes; the readers take record batches
// (v2) only.
var ErrLegacyFormat = errors.New("kfetch: legacy message sets (format v0/v1) are not supported")

// Filter carries one partition's aborted-transaction state from one fetch
// response to the next. The zero value reads uncommitted.
type Filter struct {
	ReadCommitted bool
	// aborted holds the producer ids whose current transaction was aborted:
	// added when the reader reaches the transaction's first offset, removed
	// at its abort marker.
	aborted map[int64]bool
}

// Records calls emit for every record of the response block with an offset
// in [offset, end) that a consumer at the filter's isolation level sees, in
// offset order, and returns the offset to fetch next: past every complete
// batch of the response (records below offset, compaction gaps, markers and
// aborted batches included), never into a partial trailing batch.
func (f *Filter) Records(block *sarama.FetchResponseBlock, offset, end int64, emit func(*sarama.RecordBatch, *sarama.Record)) (int64, error) {
	var txns []*sarama.AbortedTransaction
	if f.ReadCommitted && len(block.AbortedTransactions) > 0 {
		txns = slices.Clone(block.AbortedTransactions)
		slices.SortFunc(txns, func(a, b *sarama.AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	}
	for _, rs := range block.RecordsSet {
		batch := rs.RecordBatch
		if batch == nil {
			if rs.MsgSet != nil && len(rs.MsgSet.Messages) > 0 {
				return offset, ErrLegacyFormat
			}
			continue
		}
		if batch.PartialTrailingRecord {
			break // the rest comes with the next fetch
		}
		last := batch.FirstOffset + int64(batch.LastOffsetDelta)
		for len(txns) > 0 && txns[0].FirstOffset <= last {
			if f.aborted == nil {
				f.aborted = map[int64]bool{}
			}
			f.aborted[txns[0].ProducerID] = true
			txns = txns[1:]
		}
		switch {
		case batch.Control:
			for _, r := range batch.Records {
				// A control record's key is version int16, type int16; type 0 is ABORT.
				if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0 {
					delete(f.aborted, batch.ProducerID)
				}
			}
		case f.ReadCommitted && batch.IsTransactional && f.aborted[batch.ProducerID]:
			// the records of an aborted transaction
		default:
			for _, r := range batch.Records {
				if o := batch.FirstOffset + r.OffsetDelta; o >= offset && o < end {
					emit(batch, r)
				}
			}
		}
		offset = max(offset, last+1)
	}
	return offset, nil
}

// Offset is a record's offset.
func Offset(batch *sarama.RecordBatch, r *sarama.Record) int64 {
	return batch.FirstOffset + r.OffsetDelta
}

// Timestamp is a record's timestamp: its create time, or the batch's log
// append time when the topic stamps records on append.
func Timestamp(batch *sarama.RecordBatch, r *sarama.Record) time.Time {
	if batch.LogAppendTime {
		return batch.MaxTimestamp
	}
	return batch.FirstTimestamp.Add(r.TimestampDelta)
}
