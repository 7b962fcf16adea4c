package bench

import (
	"context"
	"testing"

	"github.com/differential-dev/differential/internal/workload"
)

// benchEnv is one embedded broker with one produced input, for the Go
// benchmarks: each iteration is one design run over the whole input (a
// fresh consumer group, fresh output topics), checked for correctness.
type benchEnv struct {
	h     *harness
	pt    point
	topic string
	exp   *expectation
}

func newBenchEnv(b *testing.B, pt point, model bool) *benchEnv {
	b.Helper()
	o := Options{Quick: true}.withDefaults()
	c, err := openBroker(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	recs := workload.Generate(pt.wc)
	var exp *expectation
	if model {
		exp = newExpectation(recs, pt.wc.Partitions, pt.workers, h.cfg, o.IdleTimeout)
	} else {
		exp = &expectation{recs: recs, ends: make([]int64, pt.wc.Partitions)}
		for i := range recs {
			exp.ends[recs[i].Partition]++
		}
	}
	topic, err := c.createTopic("in", pt.wc.Partitions)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.produceAll(topic, recs, pt.wc.Partitions); err != nil {
		b.Fatal(err)
	}
	return &benchEnv{h: h, pt: pt, topic: topic, exp: exp}
}

func (e *benchEnv) run(b *testing.B, k kind) {
	b.Helper()
	var total float64
	for b.Loop() {
		r, err := e.h.measure(context.Background(), runSpec{kind: k, pt: e.pt, topic: e.topic, exp: e.exp})
		if err != nil {
			b.Fatal(err)
		}
		total += r.ThroughputRPS
	}
	b.ReportMetric(total/float64(b.N), "rec/s")
}

func workloadB(records int) point {
	return point{name: "B", wc: baseWorkload(1, records, 8, 0), workers: 64, latencyScale: 1}
}

func workloadA(records int) point {
	return point{name: "A", wc: baseWorkload(1, records, 8, defaultCost), workers: 64, latencyScale: 1}
}

// BenchmarkWorkloadB_Chain and _MicroBatch: workload B (no cost) on the
// embedded broker, 5,000 records; rec/s is the design's throughput.
func BenchmarkWorkloadB_Chain(b *testing.B) {
	newBenchEnv(b, workloadB(5_000), true).run(b, kindChain)
}

func BenchmarkWorkloadB_MicroBatch(b *testing.B) {
	newBenchEnv(b, workloadB(5_000), true).run(b, kindMicroBatch)
}

// BenchmarkWorkloadA_Chain and _MicroBatch: workload A (I/O-bound, skewed),
// 1,000 records.
func BenchmarkWorkloadA_Chain(b *testing.B) {
	newBenchEnv(b, workloadA(1_000), true).run(b, kindChain)
}

func BenchmarkWorkloadA_MicroBatch(b *testing.B) {
	newBenchEnv(b, workloadA(1_000), true).run(b, kindMicroBatch)
}

// BenchmarkCeiling_Raw and _NoopChain: a plain sarama consumer group and the
// one-stage no-op chain over 100,000 records.
func BenchmarkCeiling_Raw(b *testing.B) {
	newBenchEnv(b, workloadB(100_000), false).run(b, kindRaw)
}

func BenchmarkCeiling_NoopChain(b *testing.B) {
	newBenchEnv(b, workloadB(100_000), false).run(b, kindNoop)
}

// BenchmarkPollingFallback: workload B with a 32-record handoff buffer, so
// followers poll Kafka themselves.
func BenchmarkPollingFallback(b *testing.B) {
	newBenchEnv(b, workloadB(5_000), true).run(b, kindPolling)
}
