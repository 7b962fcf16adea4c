package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	wl "github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// processedWatcher closes done when the last stage of every partition has
// passed its end: every record processed (in exactly-once mode, not yet
// necessarily committed).
type processedWatcher struct {
	last int
	mu   sync.Mutex
	ends map[int32]int64
	done chan struct{}
}

func (w *processedWatcher) Begin(chain.BeginInfo) {}
func (w *processedWatcher) Advanced(_ string, p int32, stage int, next int64, _ time.Time) {
	if stage != w.last {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.ends[p]; ok && next >= e {
		delete(w.ends, p)
		if len(w.ends) == 0 {
			close(w.done)
		}
	}
}
func (w *processedWatcher) Committed(string, int32, int64, string) {}

// BenchmarkGuarantee runs the attribution chain (Pebble state, changelog
// on, as `differential run` does by default) over one workload-B-shaped
// topic — 100,000 records, 8 partitions, 10,000 Zipf users, two hot
// partitions, no simulated cost — as one group member, at-least-once and
// exactly-once, at commit intervals of 100 ms, 1 s and 5 s. It reports the
// throughput until every record was processed by the last stage
// (processed-records/s) and until every partition's end was committed
// (committed-records/s: for exactly-once, until the outputs are visible to
// read_committed readers; it includes up to one commit interval of tail).
//
//	DIFFERENTIAL_TEST_BROKERS=127.0.0.1:9092 go test ./kafka -run XXX -bench Guarantee -benchtime 1x
func BenchmarkGuarantee(b *testing.B) {
	const partitions = 8
	br := testbroker.New(b)
	topic := br.Topic(b, partitions)
	wc := wl.DefaultConfig()
	wc.Records, wc.Partitions, wc.Seed = 100_000, partitions, 1
	wc.Users, wc.ZipfS, wc.HotPartitions, wc.HotFrac = 10_000, 1.1, 2, 0.5
	wc.MaxRecordBytes = 16 << 10
	recs, ends := produceGenerated(b, br, topic, wc)
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	for _, interval := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
		for _, exactlyOnce := range []bool{false, true} {
			mode := "at-least-once"
			if exactlyOnce {
				mode = "exactly-once"
			}
			b.Run(fmt.Sprintf("commit=%s/%s", interval, mode), func(b *testing.B) {
				var processed, committed time.Duration
				for range b.N {
					b.StopTimer()
					group := testbroker.Name(b, "guarantee")
					out, dlq := br.Topic(b, partitions), br.Topic(b, 1)
					db, err := store.OpenPebble(b.TempDir())
					if err != nil {
						b.Fatal(err)
					}
					cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{Brokers: br.Addrs(), InputTopic: topic, Group: group, Sarama: br.Config()})
					if err != nil {
						b.Fatal(err)
					}
					if br.Real() {
						defer deleteTopic(b, br, cl.Topic())
					}
					var closeProd func() error
					opts := []chain.Option{chain.WithStore(db), chain.WithChangelog(cl), chain.WithOutputTopic(out), chain.WithDLQTopic(dlq),
						chain.WithIdleTimeout(100 * time.Millisecond), chain.WithCommitInterval(interval)}
					if exactlyOnce {
						tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: br.Addrs(), TransactionalID: testbroker.Name(b, "txn"),
							Timeout: max(kafka.DefaultTransactionTimeout, 2*interval), Changelog: cl, Sarama: br.Config()})
						if err != nil {
							b.Fatal(err)
						}
						opts, closeProd = append(opts, chain.WithExactlyOnce(tx)), tx.Close
					} else {
						prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: br.Addrs(), Sarama: br.Config()})
						if err != nil {
							b.Fatal(err)
						}
						opts, closeProd = append(opts, chain.WithProducer(prod)), prod.Close
					}
					cw := &endWatcher{ends: map[int32]int64{}, done: make(chan struct{})}
					pw := &processedWatcher{last: len(attribution.Chain(cfg)) - 1, ends: map[int32]int64{}, done: make(chan struct{})}
					for p, e := range ends {
						cw.ends[p], pw.ends[p] = e, e
					}
					// The attribution default (the key-scoped gate) in both modes.
					ch, err := attribution.NewChainWith(cfg, attribution.Wiring{}, append(opts, chain.WithObserver(cw), chain.WithObserver(pw))...)
					if err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithCancel(context.Background())
					ran := make(chan error, 1)
					b.StartTimer()
					began := time.Now()
					go func() {
						ran <- kafka.Run(ctx, ch, kafka.Config{Brokers: br.Addrs(), Topic: topic, Group: group, Sarama: br.Config()})
					}()
					for _, done := range []chan struct{}{pw.done, cw.done} {
						select {
						case <-done:
						case err := <-ran:
							b.Fatalf("run ended early: %v", err)
						}
						if done == pw.done {
							processed += time.Since(began)
						}
					}
					committed += time.Since(began)
					b.StopTimer()
					cancel()
					if err := <-ran; err != nil {
						b.Fatal(err)
					}
					_ = closeProd()
					_ = cl.Close()
					_ = db.Close()
					b.StartTimer()
				}
				n := float64(len(recs) * b.N)
				b.ReportMetric(n/processed.Seconds(), "processed-records/s")
				b.ReportMetric(n/committed.Seconds(), "committed-records/s")
			})
		}
	}
}
