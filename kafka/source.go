package kafka

import (
	"context"
	"io"
	"log/slog"
	"time"

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
	probe *leaderProbe // nil: no probing
	hdrs  headerArena  // the headers of the records Fetch returns
}

var _ chain.EndConfirmer = (*claimSource)(nil) // probe.go

// Fetch blocks for the claim's next message, then takes what is already
// buffered without blocking, up to the spare capacity of dst (or the
// configured batch when dst has none). It returns io.EOF once the claim's
// channel is closed (revoke, session end).
func (s *claimSource) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	n := len(dst)
	dst, err := drain(ctx, s.claim.Messages(), dst, s.batch, io.EOF, &s.hdrs)
	if len(dst) > n && s.probe != nil {
		s.probe.contact.Store(s.probe.now().UnixNano()) // records came from the leader
	}
	return dst, err
}

// HighWatermark is the high watermark of the claim's last fetch response,
// or the leader's as last probed when that is higher (a consumer that
// stopped fetching from a live leader still shows its lag).
func (s *claimSource) HighWatermark() int64 {
	hwm := s.claim.HighWaterMarkOffset()
	if s.probe != nil {
		hwm = max(hwm, s.probe.hwm.Load())
	}
	return hwm
}

// LeaderContact implements chain.LeaderContact: when the partition's leader
// last answered the probe or delivered records (the claim's start before
// either).
func (s *claimSource) LeaderContact() time.Time {
	if s.probe == nil {
		return time.Time{}
	}
	return s.probe.LeaderContact()
}

// Poll opens a reader of the partition at offset from.
func (s *claimSource) Poll(ctx context.Context, from int64) (chain.Poller, error) {
	return s.poll.open(s.claim.Topic(), s.claim.Partition(), from, s.batch)
}

// drain receives one message (blocking), then every message the channel
// already holds, up to the limit. closedErr is returned when the channel is
// closed before a message arrives. The records' headers come from hdrs.
func drain(ctx context.Context, msgs <-chan *sarama.ConsumerMessage, dst []chain.Record, batch int, closedErr error, hdrs *headerArena) ([]chain.Record, error) {
	limit := cap(dst) - len(dst)
	if limit <= 0 {
		limit = batch
	}
	select {
	case m, ok := <-msgs:
		if !ok {
			return dst, closedErr
		}
		dst = append(dst, hdrs.record(m))
	case <-ctx.Done():
		return dst, ctx.Err()
	}
	for range limit - 1 {
		select {
		case m, ok := <-msgs:
			if !ok {
				return dst, nil // the next call reports the closing
			}
			dst = append(dst, hdrs.record(m))
		default:
			return dst, nil
		}
	}
	return dst, nil
}

// Record converts a message sarama's consumer delivered into the chain's
// record (for Source implementations over a sarama consumer).
func Record(m *sarama.ConsumerMessage) chain.Record {
	return recordWith(m, headers(m.Headers))
}

// recordWith is Record(m) with hs for its headers.
func recordWith(m *sarama.ConsumerMessage, hs []chain.Header) chain.Record {
	return chain.Record{
		Topic:     m.Topic,
		Partition: m.Partition,
		Offset:    m.Offset,
		Key:       m.Key,
		Value:     m.Value,
		Timestamp: m.Timestamp,
		Headers:   hs,
	}
}

// headerArena hands out the chain's copies of records' headers from shared
// blocks: one allocation per headerBlock headers instead of one per record
// with headers (otherwise the chain's only allocation per record on
// the consumer's path). A block lives as long as any record using it; each
// record's slice is capped at its own length, so an append to it copies
// instead of writing into a neighbour's headers.
type headerArena struct {
	block []chain.Header
}

// headerBlock is how many headers one arena block holds (48 bytes each).
const headerBlock = 512

// record is Record(m) with its headers from the arena.
func (a *headerArena) record(m *sarama.ConsumerMessage) chain.Record {
	return recordWith(m, a.headers(m.Headers))
}

// headers copies hs (nil entries skipped) into the arena.
func (a *headerArena) headers(hs []*sarama.RecordHeader) []chain.Header {
	if len(hs) == 0 {
		return nil
	}
	if cap(a.block)-len(a.block) < len(hs) {
		a.block = make([]chain.Header, 0, max(headerBlock, len(hs)))
	}
	start := len(a.block)
	for _, h := range hs {
		if h != nil {
			a.block = append(a.block, chain.Header{Key: h.Key, Value: h.Value})
		}
	}
	if len(a.block) == start {
		return nil
	}
	return a.block[start:len(a.block):len(a.block)]
}

func headers(hs []*sarama.RecordHeader) []chain.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]chain.Header, 0, len(hs))
	for _, h := range hs {
		if h != nil {
			out = append(out, chain.Header{Key: h.Key, Value: h.Value})
		}
	}
	return out
}

// pollClient is the client every follower's own reader fetches through.
// Readers share its connections; each sends its own fetch requests
// (fetchPoller), so two followers of one partition can poll at once.
type pollClient struct {
	client sarama.Client
	log    *slog.Logger
}

// open returns a reader of the partition from offset from. It sends nothing
// until the reader is asked for records, so a follower switching to polling
// mode and back costs no round trip.
func (pc *pollClient) open(topic string, partition int32, from int64, batch int) (chain.Poller, error) {
	return newFetchPoller(pc.client, pc.log, topic, partition, from, batch), nil
}
