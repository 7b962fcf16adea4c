package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kfetch"
)

// fetchPoller is a follower's own reader of a partition (chain.Poller): it
// sends its own Fetch requests at its own offset, through the shared polling
// client, only when the follower asks for records.
//
// It replaces a sarama PartitionConsumer per poller, which cost a follower
// falling out of the buffer two ListOffsets round trips and sarama's 100 ms
// subscription batching on every switch, and which prefetched to the high
// watermark and then long-polled there — holding up, on the client's one
// connection per broker, the fetches of every other poller behind it. A
// follower in polling mode is behind its leader, so the records it asks for
// exist and a fetch returns at once; it long-polls only when it has caught
// up, and then it goes back to the buffer.
//
// Records are delivered as sarama's consumer delivers them: control records
// are skipped, and with Consumer.IsolationLevel = ReadCommitted the records
// of aborted transactions are too.
type fetchPoller struct {
	client    sarama.Client
	conf      *sarama.Config
	log       *slog.Logger
	topic     string
	partition int32
	batch     int

	offset   int64 // the next offset to fetch
	maxBytes int32 // the partition's byte limit of the next fetch
	filter   kfetch.Filter
	pending  []chain.Record
	hdrs     headerArena // the pending records' headers
}

func newFetchPoller(client sarama.Client, log *slog.Logger, topic string, partition int32, from int64, batch int) *fetchPoller {
	conf := client.Config()
	return &fetchPoller{
		client: client, conf: conf, log: log, topic: topic, partition: partition, batch: batch,
		offset: from, maxBytes: conf.Consumer.Fetch.Default,
		filter: kfetch.Filter{ReadCommitted: conf.Consumer.IsolationLevel == sarama.ReadCommitted},
	}
}

// errPollOutOfRange: the poller's offset is no longer (or not yet) in the
// partition's log.
var errPollOutOfRange = errors.New("offset out of range")

// Fetch returns records from the poller's position on, fetching when none
// are pending. Transient errors (leader moves, a broken connection) are
// retried with a bounded backoff until ctx ends; an offset out of range is
// returned.
func (p *fetchPoller) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	backoff := time.Duration(0)
	for len(p.pending) == 0 {
		if err := ctx.Err(); err != nil {
			return dst, err
		}
		err := p.fetchOnce()
		if err == nil {
			backoff = 0
			continue
		}
		if errors.Is(err, errPollOutOfRange) || errors.Is(err, sarama.ErrMessageTooLarge) {
			return dst, fmt.Errorf("kafka: poll %s/%d at %d: %w", p.topic, p.partition, p.offset, err)
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		p.log.Warn("poller fetch failed; retrying", "topic", p.topic, "partition", p.partition,
			"offset", p.offset, "err", err, "backoff", backoff)
		_ = p.client.RefreshMetadata(p.topic)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return dst, ctx.Err()
		case <-t.C:
		}
	}
	n := cap(dst) - len(dst)
	if n <= 0 {
		n = p.batch
	}
	n = min(n, len(p.pending))
	dst = append(dst, p.pending[:n]...)
	clear(p.pending[:n]) // let the delivered records' bytes go
	p.pending = p.pending[n:]
	return dst, nil
}

// Close releases nothing: a fetchPoller holds no connection or goroutine of
// its own.
func (p *fetchPoller) Close() error { return nil }

// fetchOnce sends one Fetch request for the poller's partition to its
// leader and appends what it returns to pending.
func (p *fetchPoller) fetchOnce() error {
	broker, err := p.client.Leader(p.topic, p.partition)
	if err != nil {
		return err
	}
	resp, err := broker.Fetch(kfetch.NewRequest(p.conf, p.topic, p.partition, p.offset, p.maxBytes))
	if err != nil {
		// The connection is likely broken: close it so that the next
		// Leader call reopens it (sarama's consumer does the same).
		_ = broker.Close()
		return err
	}
	block, err := kfetch.Block(resp, p.topic, p.partition)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		return p.outOfRange(resp.GetBlock(p.topic, p.partition))
	}
	if err != nil {
		return err
	}
	before, delivered := p.offset, len(p.pending)
	p.offset, err = p.filter.Records(block, p.offset, math.MaxInt64, p.appendRecord)
	if err != nil {
		return err
	}
	if p.offset == before && p.offset < kfetch.End(block, p.filter.ReadCommitted) {
		// Records exist but no batch came back whole: the next one is
		// larger than the byte limit. Ask for more, as sarama's consumer
		// does.
		limit := p.conf.Consumer.Fetch.Max
		if limit > 0 && p.maxBytes >= limit {
			return fmt.Errorf("%w: a batch at offset %d exceeds Consumer.Fetch.Max (%d bytes)", sarama.ErrMessageTooLarge, p.offset, limit)
		}
		p.maxBytes = min(2*p.maxBytes, sarama.MaxResponseSize)
		if limit > 0 {
			p.maxBytes = min(p.maxBytes, limit)
		}
		return nil
	}
	if len(p.pending) > delivered {
		p.maxBytes = p.conf.Consumer.Fetch.Default
	}
	return nil
}

// outOfRange describes an offset the log does not hold. A follower behind
// the log's retention lost the records it has not processed: the error says
// which, so the operator can decide (an offset reset drops the local state,
// see DESIGN). Kafka leaves the log start and high watermark of an error
// block unset (-1; kfake fills them), so they are asked for then.
func (p *fetchPoller) outOfRange(b *sarama.FetchResponseBlock) error {
	start, high := b.LogStartOffset, b.HighWaterMarkOffset
	if start < 0 {
		if o, err := p.client.GetOffset(p.topic, p.partition, sarama.OffsetOldest); err == nil {
			start = o
		}
	}
	if high < 0 {
		if o, err := p.client.GetOffset(p.topic, p.partition, sarama.OffsetNewest); err == nil {
			high = o
		}
	}
	if start >= 0 && p.offset < start {
		return fmt.Errorf("%w: records %d to %d were deleted from the log (retention) before this reader got them (log start %d, high watermark %d)",
			errPollOutOfRange, p.offset, start-1, start, high)
	}
	return fmt.Errorf("%w (log start %d, high watermark %d)", errPollOutOfRange, start, high)
}

func (p *fetchPoller) appendRecord(batch *sarama.RecordBatch, r *sarama.Record) {
	p.pending = append(p.pending, chain.Record{
		Topic: p.topic, Partition: p.partition, Offset: kfetch.Offset(batch, r),
		Key: r.Key, Value: r.Value, Timestamp: kfetch.Timestamp(batch, r), Headers: p.hdrs.headers(r.Headers),
	})
}
