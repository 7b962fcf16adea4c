package workload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// WriterConfig says where and how a Writer writes.
type WriterConfig struct {
	Brokers []string
	// Sarama is the base client configuration; it is copied, not modified.
	// The writer sets what its guarantees depend on: the manual
	// partitioner, an idempotent producer with one request in flight
	// (retries neither duplicate nor reorder), acks=all, at least 10
	// retries, and both result channels.
	Sarama *sarama.Config
	Topic  string
	// Exact: the topic is fresh, so every record must land at its planned
	// offset (Record.Offset); one that lands elsewhere fails the write ("the
	// topic was not empty"). Then the topic's log is exactly Split(records).
	Exact bool
	// Headers, if set, gives a record's headers (the benchmark's cost).
	Headers func(*Record) []sarama.RecordHeader
	// Progress, if set, is called about once a second, from a goroutine of
	// the writer's, with the records acknowledged so far and the time since
	// the writer was made.
	Progress func(acked int, elapsed time.Duration)
}

// Writer writes generated records to a topic, in the order sent: each to
// the partition the generator planned (Record.Partition, the same as
// sarama's default hash partitioner for the same partition count), with
// its generated timestamp (the decoder's clock-skew rule reads it). Send
// and Close are called from one goroutine.
type Writer struct {
	cfg   WriterConfig
	ap    sarama.AsyncProducer
	start time.Time
	sent  int
	acked atomic.Int64
	// settled counts records acknowledged or failed; settledCh is
	// signalled at each (Close waits for every record sent to settle).
	settled   atomic.Int64
	settledCh chan struct{}

	failed chan struct{} // closed at the first failure
	once   sync.Once
	err    error // the first failure; read after failed is closed

	wg   sync.WaitGroup
	stop chan struct{} // stops the progress ticker
}

// Written is what a Writer wrote.
type Written struct {
	Records int           // acknowledged
	Took    time.Duration // from the writer's start to the last acknowledgement
}

// NewWriter starts an asynchronous producer for cfg.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	sc := *cfg.Sarama
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = max(sc.Producer.Retry.Max, 10)
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	ap, err := sarama.NewAsyncProducer(cfg.Brokers, &sc)
	if err != nil {
		return nil, fmt.Errorf("producer for brokers %v: %w", cfg.Brokers, err)
	}
	w := &Writer{cfg: cfg, ap: ap, start: time.Now(), failed: make(chan struct{}), stop: make(chan struct{}), settledCh: make(chan struct{}, 1)}
	w.wg.Go(func() {
		for m := range ap.Successes() {
			w.acked.Add(1)
			if planned := m.Metadata.(int64); cfg.Exact && m.Offset != planned {
				w.fail(fmt.Errorf("record %d/%d landed at offset %d of %s: the topic was not empty", m.Partition, planned, m.Offset, cfg.Topic))
			}
			w.settle()
		}
	})
	w.wg.Go(func() {
		for pe := range ap.Errors() {
			w.fail(fmt.Errorf("produce to %s/%d (record timestamp %s): %w", cfg.Topic, pe.Msg.Partition, pe.Msg.Timestamp.UTC().Format(time.RFC3339), pe.Err))
			w.settle()
		}
	})
	if cfg.Progress != nil {
		w.wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					cfg.Progress(int(w.acked.Load()), time.Since(w.start))
				case <-w.stop:
					return
				}
			}
		})
	}
	return w, nil
}

func (w *Writer) settle() {
	w.settled.Add(1)
	select {
	case w.settledCh <- struct{}{}:
	default:
	}
}

func (w *Writer) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.failed)
	})
}

// Send hands r to the producer, waiting while its input is full. It
// returns the first failure so far (a record not acknowledged, or landed
// elsewhere with Exact), or ctx's error.
func (w *Writer) Send(ctx context.Context, r *Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &sarama.ProducerMessage{
		Topic: w.cfg.Topic, Partition: r.Partition, Timestamp: r.Timestamp,
		Key: sarama.ByteEncoder(r.Key), Value: sarama.ByteEncoder(r.Value), Metadata: r.Offset,
	}
	if w.cfg.Headers != nil {
		m.Headers = w.cfg.Headers(r)
	}
	select {
	case w.ap.Input() <- m:
		w.sent++
		return nil
	case <-w.failed:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Acked is how many records are acknowledged so far.
func (w *Writer) Acked() int { return int(w.acked.Load()) }

// Close flushes, waits until every record sent is acknowledged or failed,
// and returns what was written and the first failure. It closes the
// producer only then: sarama fails the records it is retrying when it is
// closed (a real broker answers NOT_LEADER_OR_FOLLOWER to the first
// produce requests of a topic created a moment before), so closing at once
// would fail records that the retry would have written.
func (w *Writer) Close() (Written, error) {
wait:
	for w.settled.Load() < int64(w.sent) {
		select {
		case <-w.settledCh:
		case <-w.failed:
			// A failure ends the write: close now (what is being retried
			// fails too).
			break wait
		}
	}
	w.ap.AsyncClose()
	close(w.stop)
	w.wg.Wait()
	out := Written{Records: w.Acked(), Took: time.Since(w.start)}
	select {
	case <-w.failed:
		return out, w.err
	default:
	}
	if out.Records != w.sent {
		return out, fmt.Errorf("%d of %d records sent to %s acknowledged", out.Records, w.sent, w.cfg.Topic)
	}
	return out, nil
}

// Write writes recs in order with a new Writer and closes it: it returns
// once every record is acknowledged (acks=all), or with the first error.
func Write(ctx context.Context, cfg WriterConfig, recs []Record) (Written, error) {
	w, err := NewWriter(cfg)
	if err != nil {
		return Written{}, err
	}
	for i := range recs {
		if err := w.Send(ctx, &recs[i]); err != nil {
			out, _ := w.Close()
			if ctx.Err() != nil {
				err = fmt.Errorf("interrupted after %d of %d records: %w", out.Records, len(recs), err)
			}
			return out, err
		}
	}
	return w.Close()
}
