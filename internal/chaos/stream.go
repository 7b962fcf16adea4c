package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/workload"
)

// Stream writes records to their planned partitions and offsets of a fresh
// topic with workload's Writer (an idempotent producer, acks=all, one
// request in flight, so retries neither duplicate nor reorder): Burst
// records every Tick up to HoldAt, then it waits for Release and writes the
// rest as fast as the producer takes them. Holding back the tail keeps
// records arriving after the last fault, so recovery shows in the lag.
type Stream struct {
	Brokers []string
	Topic   string
	Records []workload.Record
	Burst   int
	Tick    time.Duration
	HoldAt  int

	release     chan struct{}
	releaseOnce sync.Once
	holding     atomic.Bool
	onHold      func() // called once if the stream reaches HoldAt before Release; set before Run
}

// NewStream returns a stream; Run writes it.
func NewStream(brokers []string, topic string, recs []workload.Record, burst int, tick time.Duration, holdAt int) *Stream {
	return &Stream{Brokers: brokers, Topic: topic, Records: recs, Burst: burst, Tick: tick,
		HoldAt: min(holdAt, len(recs)), release: make(chan struct{})}
}

// Release lets the stream write its held-back tail.
func (s *Stream) Release() { s.releaseOnce.Do(func() { close(s.release) }) }

// Holding reports whether the stream has written every record before
// HoldAt and waits for Release.
func (s *Stream) Holding() bool { return s.holding.Load() }

// streamConfig is the writer's base configuration, made to outlast a broker
// outage of a minute or more: every failed request is retried (a leader
// election takes the brokers' 9 s session timeout), and a request to a
// paused broker fails after 10 s instead of sarama's 30 s.
func streamConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = "differential-chaos-stream"
	sc.Version = sarama.V3_0_0_0
	sc.Producer.Timeout = 5 * time.Second
	sc.Net.ReadTimeout = 10 * time.Second
	sc.Producer.Retry.Max = 1000
	sc.Producer.Retry.Backoff = 200 * time.Millisecond
	sc.Metadata.Retry.Max = 1000
	sc.Metadata.Retry.Backoff = 200 * time.Millisecond
	return sc
}

// Run writes every record and returns once each is acknowledged at its
// planned offset, or at the first error.
func (s *Stream) Run(ctx context.Context) error {
	w, err := workload.NewWriter(workload.WriterConfig{Brokers: s.Brokers, Sarama: streamConfig(), Topic: s.Topic, Exact: true})
	if err != nil {
		return err
	}
	err = s.send(ctx, w)
	_, cerr := w.Close()
	if err != nil {
		return err
	}
	return cerr
}

func (s *Stream) send(ctx context.Context, w *workload.Writer) error {
	tick := time.NewTicker(s.Tick)
	defer tick.Stop()
	sent, hold := 0, s.HoldAt
	for sent < hold {
		for end := min(sent+s.Burst, hold); sent < end; sent++ {
			if err := w.Send(ctx, &s.Records[sent]); err != nil {
				return err
			}
		}
		if sent == hold {
			break
		}
		select {
		case <-tick.C:
		case <-s.release:
			hold = len(s.Records) // released before the hold: no more pacing
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-s.release:
	default:
		s.holding.Store(true)
		if s.onHold != nil {
			s.onHold()
		}
		select {
		case <-s.release:
			s.holding.Store(false)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for ; sent < len(s.Records); sent++ {
		if err := w.Send(ctx, &s.Records[sent]); err != nil {
			return err
		}
	}
	return nil
}
