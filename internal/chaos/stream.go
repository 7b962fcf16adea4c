package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/workload"
)

// Stream writes records to their planned partitions of a fresh topic with
// an idempotent producer (acks=all, one request in flight per broker, so
// retries neither duplicate nor reorder): Burst records every Tick up to
// HoldAt, then it waits for Release and writes the rest as fast as the
// producer takes them. Holding back the tail keeps records arriving after
// the last fault, so recovery shows as the lag returning to zero.
type Stream struct {
	Brokers []string
	Topic   string
	Records []workload.Record
	Burst   int
	Tick    time.Duration
	HoldAt  int

	release     chan struct{}
	releaseOnce sync.Once
	acked       atomic.Int64
	holding     atomic.Bool
	onHold      func() // called once if the stream reaches HoldAt before Release; set before Run
}

// Holding reports whether the stream has written every record before
// HoldAt and waits for Release.
func (s *Stream) Holding() bool { return s.holding.Load() }

// NewStream returns a stream; Run writes it.
func NewStream(brokers []string, topic string, recs []workload.Record, burst int, tick time.Duration, holdAt int) *Stream {
	return &Stream{Brokers: brokers, Topic: topic, Records: recs, Burst: burst, Tick: tick,
		HoldAt: min(holdAt, len(recs)), release: make(chan struct{})}
}

// Release lets the stream write its held-back tail.
func (s *Stream) Release() { s.releaseOnce.Do(func() { close(s.release) }) }

// Acked is how many records Kafka has acknowledged.
func (s *Stream) Acked() int64 { return s.acked.Load() }

// producerConfig survives a broker outage of a minute or more: every
// failed request is retried (leader elections take a broker session
// timeout, ~9 s), and a request to a paused broker fails after 10 s
// instead of sarama's 30 s.
func producerConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = "differential-chaos-stream"
	sc.Version = sarama.V3_0_0_0
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Timeout = 5 * time.Second
	sc.Net.MaxOpenRequests = 1
	sc.Net.ReadTimeout = 10 * time.Second
	sc.Producer.Retry.Max = 1000
	sc.Producer.Retry.Backoff = 200 * time.Millisecond
	sc.Metadata.Retry.Max = 1000
	sc.Metadata.Retry.Backoff = 200 * time.Millisecond
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	return sc
}

// Run writes every record and returns once each is acknowledged, or at the
// first error.
func (s *Stream) Run(ctx context.Context) error {
	ap, err := sarama.NewAsyncProducer(s.Brokers, producerConfig())
	if err != nil {
		return fmt.Errorf("stream producer: %w", err)
	}
	err = s.loop(ctx, ap)
	// Both channels must be drained until sarama closes them.
	ap.AsyncClose()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range ap.Successes() {
		}
	})
	for range ap.Errors() {
	}
	wg.Wait()
	return err
}

func (s *Stream) loop(ctx context.Context, ap sarama.AsyncProducer) error {
	tick := time.NewTicker(s.Tick)
	defer tick.Stop()
	sent, allowed := 0, 0
	total := len(s.Records)
	released := s.release
	for s.acked.Load() < int64(total) {
		var in chan<- *sarama.ProducerMessage
		var next *sarama.ProducerMessage
		if sent < allowed {
			r := &s.Records[sent]
			next = &sarama.ProducerMessage{Topic: s.Topic, Partition: r.Partition, Timestamp: r.Timestamp,
				Key: sarama.ByteEncoder(r.Key), Value: sarama.ByteEncoder(r.Value)}
			in = ap.Input()
		}
		select {
		case in <- next:
			sent++
		case <-tick.C:
			if allowed < s.HoldAt {
				allowed = min(allowed+s.Burst, s.HoldAt)
			} else if released != nil && sent == allowed && !s.holding.Swap(true) && s.onHold != nil {
				s.onHold()
			}
		case <-released:
			released = nil
			s.holding.Store(false)
			allowed = total
			tick.Stop()
		case <-ap.Successes():
			s.acked.Add(1)
		case pe := <-ap.Errors():
			return fmt.Errorf("stream: produce to %s/%d: %w", s.Topic, pe.Msg.Partition, pe.Err)
		case <-ctx.Done():
			return fmt.Errorf("stream: interrupted after %d of %d records: %w", s.acked.Load(), total, ctx.Err())
		}
	}
	return nil
}
