package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"
)

// What the Producer, the Transactor and the Changelog share: their sarama
// configuration (a client of their own, an idempotent producer), the two
// readers of an AsyncProducer's acknowledgements, and a producer whose
// input is guarded against its Close.

// needBrokers is the error of a configuration (named what) without brokers.
func needBrokers(what string, brokers []string) error {
	if len(brokers) == 0 {
		return fmt.Errorf("kafka: %s.Brokers is empty: name at least one bootstrap broker as host:port", what)
	}
	return nil
}

// orDiscard is l, or a logger that discards when l is nil.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// dial is how the Producer and the Transactor connect: it builds their
// sarama configuration (config), warns when it sends in the clear, and opens
// what open makes of it (a client, a producer) on brokers; a failure to
// connect names what failed and is explained (ExplainConnect). It returns
// the opened value, the configuration and the logger (discarding when
// logger is nil).
func dial[T any](brokers []string, sec Security, logger *slog.Logger, config func() (*sarama.Config, error), what string, open func([]string, *sarama.Config) (T, error)) (T, *sarama.Config, *slog.Logger, error) {
	var zero T
	sc, err := config()
	if err != nil {
		return zero, nil, nil, err
	}
	log := orDiscard(logger)
	warnInsecure(log, sc)
	c, err := open(brokers, sc)
	if err != nil {
		return zero, nil, nil, fmt.Errorf("kafka: %s for brokers %v: %w", what, brokers, ExplainConnect(err, sec))
	}
	return c, sc, log, nil
}

// clientConfig copies base into the configuration of a client of its own:
// the client id gets suffix, the metrics go to reg (when given), and the
// protocol version is at least minVersion.
func clientConfig(base *sarama.Config, suffix string, reg metrics.Registry, minVersion sarama.KafkaVersion) sarama.Config {
	sc := *base
	if sc.ClientID == "" || sc.ClientID == "sarama" {
		sc.ClientID = "differential"
	}
	sc.ClientID += suffix
	if reg != nil {
		sc.MetricRegistry = reg
	}
	if !sc.Version.IsAtLeast(minVersion) {
		sc.Version = minVersion
	}
	return sc
}

// idempotent is clientConfig for an idempotent producer: acks=all with one
// open request per connection (retries neither duplicate nor reorder), the
// retry budget at least DefaultProducerRetries, and successes and errors
// returned (readAcks reads both). The Producer, the Transactor and the
// Changelog's producer all start from it.
func idempotent(base *sarama.Config, suffix string, reg metrics.Registry, minVersion sarama.KafkaVersion) sarama.Config {
	sc := clientConfig(base, suffix, reg, minVersion)
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = max(sc.Producer.Retry.Max, DefaultProducerRetries)
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	return sc
}

// readAcks starts, in wg, ap's two readers: acked runs for every message
// the brokers acknowledged, failed for every one that failed. Both
// channels must be read until AsyncClose closes them (an unread one stalls
// the producer); wg is done once both are.
func readAcks(wg *sync.WaitGroup, ap sarama.AsyncProducer, acked func(*sarama.ProducerMessage), failed func(*sarama.ProducerError)) {
	wg.Go(func() {
		for m := range ap.Successes() {
			acked(m)
		}
	})
	wg.Go(func() {
		for pe := range ap.Errors() {
			failed(pe)
		}
	})
}

// ackedProducer is an AsyncProducer with its acknowledgement readers, and a
// lock that keeps every send from racing its close: sends hold it for
// reading, close for writing.
type ackedProducer struct {
	ap      sarama.AsyncProducer
	readers sync.WaitGroup
	mu      sync.RWMutex
	closed  bool
}

func newAckedProducer(ap sarama.AsyncProducer, acked func(*sarama.ProducerMessage), failed func(*sarama.ProducerError)) *ackedProducer {
	a := &ackedProducer{ap: ap}
	readAcks(&a.readers, ap, acked, failed)
	return a
}

// errNotHandedOver reports that ctx ended before a send handed a message
// to the producer: sendAll returns it wrapping ctx's error.
var errNotHandedOver = errors.New("not handed over")

// sendAll hands n messages (msg(i), built only when it is its turn) to the
// producer in order, blocking while its input is full. It returns
// ErrProducerClosed after close, or, with the index of the first message
// not handed over, an error wrapping errNotHandedOver and ctx's error.
func (a *ackedProducer) sendAll(ctx context.Context, n int, msg func(i int) *sarama.ProducerMessage) (int, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return 0, ErrProducerClosed
	}
	for i := range n {
		if ctx.Err() != nil {
			return i, fmt.Errorf("%w: %w", errNotHandedOver, ctx.Err())
		}
		select {
		case a.ap.Input() <- msg(i):
		case <-ctx.Done():
			return i, fmt.Errorf("%w: %w", errNotHandedOver, ctx.Err())
		}
	}
	return n, nil
}

// close closes the producer and returns once every message handed to it
// was acknowledged or failed (both readers have ended). It reports false,
// doing nothing, when the producer was already closed.
func (a *ackedProducer) close() bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	a.closed = true
	a.mu.Unlock()
	// AsyncClose, not Close: sarama's Close reads Errors itself, and the
	// readers must see every error.
	a.ap.AsyncClose()
	a.readers.Wait()
	return true
}
