package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
)

// claimSource is the chain.Source of one claimed partition: the claim's
// message channel is the partition's main stream; Poll opens independent
// readers on the shared polling client.
type claimSource struct {
	claim sarama.ConsumerGroupClaim
	batch int
	poll  *pollClient
}

// Fetch blocks for the claim's next message, then takes what is already
// buffered without blocking, up to the spare capacity of dst (or the
// configured batch when dst has none). It returns io.EOF once the claim's
// channel is closed (revoke, session end).
func (s *claimSource) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	return drain(ctx, s.claim.Messages(), dst, s.batch, io.EOF)
}

// HighWatermark is the high watermark of the claim's last fetch response.
func (s *claimSource) HighWatermark() int64 { return s.claim.HighWaterMarkOffset() }

// Poll opens a reader of the partition at offset from.
func (s *claimSource) Poll(ctx context.Context, from int64) (chain.Poller, error) {
	return s.poll.open(s.claim.Topic(), s.claim.Partition(), from, s.batch)
}

// drain receives one message (blocking), then every message the channel
// already holds, up to the limit. closedErr is returned when the channel is
// closed before a message arrives.
func drain(ctx context.Context, msgs <-chan *sarama.ConsumerMessage, dst []chain.Record, batch int, closedErr error) ([]chain.Record, error) {
	limit := cap(dst) - len(dst)
	if limit <= 0 {
		limit = batch
	}
	select {
	case m, ok := <-msgs:
		if !ok {
			return dst, closedErr
		}
		dst = append(dst, record(m))
	case <-ctx.Done():
		return dst, ctx.Err()
	}
	for range limit - 1 {
		select {
		case m, ok := <-msgs:
			if !ok {
				return dst, nil // the next call reports the closing
			}
			dst = append(dst, record(m))
		default:
			return dst, nil
		}
	}
	return dst, nil
}

func record(m *sarama.ConsumerMessage) chain.Record {
	r := chain.Record{
		Topic:     m.Topic,
		Partition: m.Partition,
		Offset:    m.Offset,
		Key:       m.Key,
		Value:     m.Value,
		Timestamp: m.Timestamp,
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]chain.Header, 0, len(m.Headers))
		for _, h := range m.Headers {
			if h != nil {
				r.Headers = append(r.Headers, chain.Header{Key: h.Key, Value: h.Value})
			}
		}
	}
	return r
}

// pollClient is the client every follower's own reader fetches through. A
// sarama Consumer allows one PartitionConsumer per partition, and two
// followers of one partition may poll at once, so each reader gets its own
// Consumer over this shared client (Consumers are cheap; the connections
// are the client's).
type pollClient struct {
	client sarama.Client
	log    *slog.Logger
}

func (pc *pollClient) open(topic string, partition int32, from int64, batch int) (chain.Poller, error) {
	c, err := sarama.NewConsumerFromClient(pc.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: poller consumer: %w", err)
	}
	part, err := c.ConsumePartition(topic, partition, from)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("kafka: poll %s/%d from %d: %w", topic, partition, from, err)
	}
	p := &poller{consumer: c, part: part, batch: batch, topic: topic, partition: partition}
	// The partition consumer blocks on a full error channel, so it is
	// drained for the poller's whole life; the errors are ones sarama
	// retries (the fatal ones close the message channel, which Fetch
	// reports).
	p.errs.Go(func() {
		for e := range part.Errors() {
			p.mu.Lock()
			p.last = e.Err
			p.mu.Unlock()
			pc.log.Warn("poller fetch error", "topic", topic, "partition", partition, "err", e.Err)
		}
	})
	return p, nil
}

// poller is a follower's own reader of a partition (chain.Poller).
type poller struct {
	consumer  sarama.Consumer
	part      sarama.PartitionConsumer
	batch     int
	topic     string
	partition int32
	errs      sync.WaitGroup

	mu   sync.Mutex
	last error
}

// Fetch blocks for the next message, then takes what is buffered. The
// message channel of an open poller closes only when sarama gave up on the
// partition (e.g. offset out of range); that is an error, not the end of the
// claim, so it is not io.EOF.
func (p *poller) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	out, err := drain(ctx, p.part.Messages(), dst, p.batch, errPollerStopped)
	if err == errPollerStopped {
		p.mu.Lock()
		last := p.last
		p.mu.Unlock()
		err = fmt.Errorf("kafka: poller of %s/%d stopped (last error: %v)", p.topic, p.partition, last)
	}
	return out, err
}

var errPollerStopped = fmt.Errorf("poller stopped")

// Close stops the reader and waits until sarama has released the partition.
func (p *poller) Close() error {
	p.part.AsyncClose()
	p.errs.Wait() // Errors closes when the partition consumer has shut down
	return p.consumer.Close()
}
