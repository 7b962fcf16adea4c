package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	wl "github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// endWatcher closes done once every partition's commit reached its end.
type endWatcher struct {
	mu   sync.Mutex
	ends map[int32]int64
	done chan struct{}
}

func (w *endWatcher) Begin(chain.BeginInfo)                         {}
func (w *endWatcher) Advanced(string, int32, int, int64, time.Time) {}
func (w *endWatcher) Committed(_ string, p int32, off int64, _ string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.ends[p]; ok && off >= e {
		delete(w.ends, p)
		if len(w.ends) == 0 {
			close(w.done)
		}
	}
}

// produceGenerated writes the workload wc generates to topic and returns
// its records and each partition's end offset.
func produceGenerated(b *testing.B, br *testbroker.Broker, topic string, wc wl.Config) ([]wl.Record, map[int32]int64) {
	b.Helper()
	recs := wl.Generate(wc)
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{Key: sarama.ByteEncoder(r.Key), Value: sarama.ByteEncoder(r.Value), Timestamp: r.Timestamp}
	}
	br.Produce(b, topic, msgs...)
	ends := map[int32]int64{}
	for _, m := range msgs {
		ends[m.Partition] = max(ends[m.Partition], m.Offset+1)
	}
	return recs, ends
}

// BenchmarkChangelogOverhead runs the attribution chain (Pebble state) over
// the same 100,000-record, 8-partition topic as one group member, with and
// without a changelog, from the group's join to the commit of every
// partition's end: what keeping the state in a changelog costs in
// throughput.
//
//	go test ./kafka -run XXX -bench ChangelogOverhead -benchtime 3x
func BenchmarkChangelogOverhead(b *testing.B) {
	const partitions = 8
	br := testbroker.New(b)
	topic, out := br.Topic(b, partitions), br.Topic(b, partitions)
	wc := wl.DefaultConfig()
	wc.Records, wc.Partitions, wc.Seed = 100_000, partitions, 5
	wc.MaxRecordBytes = 16 << 10
	recs, ends := produceGenerated(b, br, topic, wc)
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	for _, withChangelog := range []bool{false, true} {
		name := "changelog=off"
		if withChangelog {
			name = "changelog=on"
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			var appended int64
			for range b.N {
				b.StopTimer()
				group := testbroker.Name(b, "overhead")
				db, err := store.OpenPebble(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: br.Addrs(), Sarama: br.Config()})
				if err != nil {
					b.Fatal(err)
				}
				w := &endWatcher{ends: map[int32]int64{}, done: make(chan struct{})}
				for p, e := range ends {
					w.ends[p] = e
				}
				opts := []chain.Option{chain.WithStore(db), chain.WithProducer(prod), chain.WithOutputTopic(out),
					chain.WithObserver(w), chain.WithIdleTimeout(100 * time.Millisecond)}
				var cl *kafka.Changelog
				if withChangelog {
					if cl, err = kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{Brokers: br.Addrs(), InputTopic: topic, Group: group, Sarama: br.Config()}); err != nil {
						b.Fatal(err)
					}
					opts = append(opts, chain.WithChangelog(cl))
					if br.Real() {
						defer deleteTopic(b, br, cl.Topic())
					}
				}
				ch, err := chain.New(attribution.Chain(cfg), attribution.Decoder(cfg), append(opts, chain.WithLateness(cfg.Lateness))...)
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
				select {
				case <-w.done:
				case err := <-ran:
					b.Fatalf("run ended early: %v", err)
				}
				total += time.Since(began)
				b.StopTimer()
				cancel()
				if err := <-ran; err != nil {
					b.Fatal(err)
				}
				_ = prod.Close()
				if cl != nil {
					for p := range int32(partitions) {
						part, err := cl.Partition(topic, p)
						if err != nil {
							b.Fatal(err)
						}
						end, err := part.End(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						appended += end
					}
					_ = cl.Close()
				}
				_ = db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(len(recs))*float64(b.N)/total.Seconds(), "records/s")
			b.ReportMetric(float64(appended)/float64(len(recs)*b.N), "changelog-records/record")
		})
	}
}
