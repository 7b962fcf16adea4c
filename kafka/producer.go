package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
)

// ErrProducerClosed is passed to done by Produce after Close.
var ErrProducerClosed = errors.New("kafka: producer is closed")

// ProducerConfig configures NewProducer. Brokers is required.
type ProducerConfig struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// Sarama is an optional base configuration (version, TLS, SASL,
	// batching, compression, retry backoff). It is copied, never modified.
	// The producer overrides what its guarantees depend on: idempotence,
	// acks=all, one open request per connection, successes and errors
	// returned, and at least DefaultProducerRetries retries (with
	// RetryBackoff between them unless the base sets a BackoffFunc).
	Sarama *sarama.Config
	// Security configures TLS and SASL, as Config.Security does.
	Security Security
	// Logger receives the producer's logs. Default: discard.
	Logger *slog.Logger
	// Registry, when set, becomes sarama's MetricRegistry. Default: the base's.
	Registry metrics.Registry
}

// DefaultProducerRetries is the least number of retries of a failed produce
// request (the base's Producer.Retry.Max when larger). With RetryBackoff they
// span about two minutes, as the Java producer's delivery.timeout.ms does by
// default: a lost partition leader is replaced only after the controller
// stops hearing from its broker (broker.session.timeout.ms, 9 s by default),
// and a request to a paused broker fails only after Net.ReadTimeout (30 s).
// A failed produce is fatal to the partition (I5 allows no other answer), so
// the budget must outlast a leader election: the fault-injection suite
// (internal/chaos, output-leader-kill) stopped the engine with the former
// budget of 10 retries of 100 ms.
const DefaultProducerRetries = 120

// RetryBackoff is the wait before produce retry n (from 0): 100 ms doubling
// to at most 1 s.
func RetryBackoff(n, _ int) time.Duration {
	return min(100*time.Millisecond<<min(n, 4), time.Second)
}

func (c *ProducerConfig) saramaConfig() (*sarama.Config, error) {
	if err := needBrokers("ProducerConfig", c.Brokers); err != nil {
		return nil, err
	}
	base, err := secured(c.Sarama, c.Security)
	if err != nil {
		return nil, err
	}
	sc := idempotent(base, "-producer", c.Registry, sarama.V0_11_0_0) // idempotence and headers need 0.11
	if sc.Producer.Retry.BackoffFunc == nil {
		sc.Producer.Retry.BackoffFunc = RetryBackoff
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("kafka: sarama producer configuration: %w", err)
	}
	return &sc, nil
}

// Producer implements chain.Producer with its own sarama client and an
// idempotent AsyncProducer (acks=all, one open request per connection, so
// retries neither duplicate nor reorder a partition's records).
//
// Its client is never shared with consuming: sarama keeps one connection per
// broker per client and answers requests in order, so a produce request
// queued behind a fetch long-poll would wait for it.
//
// Produce and Close may be called from any goroutine.
type Producer struct {
	out *ackedProducer
	log *slog.Logger

	// A message the brokers refused for its size may have been refused
	// for its batch's (max.message.bytes bounds a batch): it is sent again
	// alone, by a producer that sends one message per request, created on
	// the first refusal. Only a message refused alone is too large.
	brokers []string
	sc      *sarama.Config
	alone   struct {
		sync.Mutex
		p sarama.SyncProducer
	}
	resends sync.WaitGroup
}

// ackGroup is one Produce call: carried in every message's Metadata, it
// calls done once every message is acknowledged, or at the first error.
type ackGroup struct {
	remaining atomic.Int64
	fired     atomic.Bool
	done      func(error)
}

func (g *ackGroup) ack(err error) {
	if err != nil {
		if g.fired.CompareAndSwap(false, true) {
			g.done(err)
		}
		return
	}
	if g.remaining.Add(-1) == 0 && g.fired.CompareAndSwap(false, true) {
		g.done(nil)
	}
}

// NewProducer connects a producer to the brokers.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	ap, sc, log, err := dial(cfg.Brokers, cfg.Security, cfg.Logger, cfg.saramaConfig, "producer", sarama.NewAsyncProducer)
	if err != nil {
		return nil, err
	}
	p := &Producer{log: log, brokers: cfg.Brokers, sc: sc}
	p.out = newAckedProducer(ap, func(m *sarama.ProducerMessage) {
		if g, ok := m.Metadata.(*ackGroup); ok {
			g.ack(nil)
		}
	}, p.failed)
	return p, nil
}

// failed fails the Produce call of a message the brokers refused, or sends
// it again alone when its batch may have been refused for its size.
func (p *Producer) failed(pe *sarama.ProducerError) {
	g, ok := pe.Msg.Metadata.(*ackGroup)
	if !ok {
		p.log.Error("produce failed", "topic", pe.Msg.Topic, "err", pe.Err)
		return
	}
	switch {
	case refusedAlone(pe.Err):
		// The chain dead-letters such a message minimal instead
		// of failing its partition (chain.ProduceDeadLetter).
		g.ack(fmt.Errorf("kafka: produce to %s: %w: %w", pe.Msg.Topic, chain.ErrMessageTooLarge, pe.Err))
	case tooLarge(pe.Err):
		// Nothing of the refused batch was written: sending
		// the message again duplicates nothing.
		msg := pe.Msg
		p.resends.Go(func() { g.ack(p.sendAlone(msg)) })
	default:
		g.ack(fmt.Errorf("kafka: produce to %s: %w", pe.Msg.Topic, pe.Err))
	}
}

// refusedAlone reports whether err refuses one message for its own size:
// the client's Producer.MaxMessageBytes check, which weighs each message
// alone. A broker's MESSAGE_TOO_LARGE refuses a whole batch.
func refusedAlone(err error) bool {
	var cerr sarama.ConfigurationError
	return errors.As(err, &cerr) && tooLarge(err)
}

// sendAlone sends msg again in a request of its own and returns its
// result: nil once acknowledged, an error wrapping chain.ErrMessageTooLarge
// when the brokers refuse it alone.
func (p *Producer) sendAlone(msg *sarama.ProducerMessage) error {
	sp, err := p.aloneProducer()
	if err != nil {
		return fmt.Errorf("kafka: produce to %s: the batch was refused as too large, and a producer to send the message alone: %w", msg.Topic, err)
	}
	again := &sarama.ProducerMessage{Topic: msg.Topic, Key: msg.Key, Value: msg.Value, Headers: msg.Headers, Timestamp: msg.Timestamp}
	if _, _, err := sp.SendMessage(again); err != nil {
		if tooLarge(err) {
			return fmt.Errorf("kafka: produce to %s: %w: refused alone (%d bytes): %w", msg.Topic, chain.ErrMessageTooLarge, again.ByteSize(2), err)
		}
		return fmt.Errorf("kafka: produce to %s (sent alone after its batch was refused as too large): %w", msg.Topic, err)
	}
	p.log.Debug("a message of a batch refused as too large was accepted alone", "topic", msg.Topic, "partition", again.Partition, "offset", again.Offset)
	return nil
}

// aloneProducer returns the producer that sends one message per request,
// creating it on first use: an idempotent producer on a client of its
// own, with the Producer's configuration but no batching.
func (p *Producer) aloneProducer() (sarama.SyncProducer, error) {
	p.alone.Lock()
	defer p.alone.Unlock()
	if p.alone.p != nil {
		return p.alone.p, nil
	}
	sc := *p.sc
	sc.ClientID += "-alone"
	sc.Producer.Flush.Bytes, sc.Producer.Flush.Messages, sc.Producer.Flush.Frequency = 0, 0, 0
	sc.Producer.Flush.MaxMessages = 1
	sp, err := sarama.NewSyncProducer(p.brokers, &sc)
	if err != nil {
		return nil, err
	}
	p.alone.p = sp
	return sp, nil
}

// Produce implements chain.Producer: it hands msgs to the producer (blocking
// while sarama's input buffer is full) and calls done exactly once — with nil
// when Kafka acknowledged every message (acks=all), or with the first error.
// It copies nothing but the slice of headers; the byte slices msgs point to
// must stay valid until done runs (chain.Producer's contract).
func (p *Producer) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	if len(msgs) == 0 {
		done(nil)
		return
	}
	var g *ackGroup
	var one *producerMessage
	if len(msgs) == 1 {
		s := new(singleProduce)
		g, one = &s.g, &s.m
	} else {
		g = new(ackGroup)
	}
	g.done = done
	g.remaining.Store(int64(len(msgs)))
	i, err := p.out.sendAll(ctx, len(msgs), func(i int) *sarama.ProducerMessage {
		if one != nil {
			return one.fill(&msgs[i], g)
		}
		return toProducerMessage(&msgs[i], g)
	})
	switch {
	case errors.Is(err, ErrProducerClosed):
		g.ack(ErrProducerClosed)
	case err != nil:
		// Not handed over: fail the call (done runs once, with the
		// first error; acknowledgements of what was sent are ignored).
		g.ack(fmt.Errorf("kafka: produce to %s: %w", msgs[i].Topic, err))
	}
}

// producerMessage is a sarama message together with its key and value
// encoders and room for its first headers: one allocation per output
// message instead of four (the message, each encoder boxed into an
// interface, the headers). Key and Value point at the encoders held here.
type producerMessage struct {
	pm         sarama.ProducerMessage
	key, value sarama.ByteEncoder
	headers    [2]sarama.RecordHeader
}

// singleProduce is the memory of a Produce call of one message, the usual
// one (a record's output): its ackGroup and its message in one allocation.
type singleProduce struct {
	g ackGroup
	m producerMessage
}

func toProducerMessage(m *chain.Message, g *ackGroup) *sarama.ProducerMessage {
	return new(producerMessage).fill(m, g)
}

// fill makes s the sarama message of m, acknowledged to g, and returns it.
func (s *producerMessage) fill(m *chain.Message, g *ackGroup) *sarama.ProducerMessage {
	s.pm = sarama.ProducerMessage{Topic: m.Topic, Metadata: g}
	pm := &s.pm
	if m.Key != nil {
		s.key = m.Key
		pm.Key = &s.key
	}
	if m.Value != nil {
		s.value = m.Value
		pm.Value = &s.value
	}
	if len(m.Headers) > 0 {
		if len(m.Headers) <= len(s.headers) {
			pm.Headers = s.headers[:len(m.Headers)]
		} else {
			pm.Headers = make([]sarama.RecordHeader, len(m.Headers))
		}
		for i, h := range m.Headers {
			pm.Headers[i] = sarama.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return pm
}

// Close flushes: it waits until every message handed to Produce is
// acknowledged or failed (every done has run), then closes the client.
// Produce after Close calls done(ErrProducerClosed). Close is idempotent.
func (p *Producer) Close() error {
	if !p.out.close() {
		return nil
	}
	p.resends.Wait()
	p.alone.Lock()
	defer p.alone.Unlock()
	if p.alone.p != nil {
		if err := p.alone.p.Close(); err != nil {
			return fmt.Errorf("kafka: close the producer of messages sent alone: %w", err)
		}
	}
	return nil
}
