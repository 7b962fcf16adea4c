package bench

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/differential-dev/differential/internal/testbroker"
)

// benchEnv is one embedded broker with one produced input (a prefix of a
// point's stream), for the Go benchmarks: each iteration is one design run
// over the whole input (a fresh consumer group, fresh output topics),
// checked for correctness.
type benchEnv struct {
	h    *harness
	spec runSpec
	in   *input
}

func newBenchEnv(b *testing.B, pt point, records int, model bool) *benchEnv {
	b.Helper()
	o := Options{Quick: true}.withDefaults()
	c, err := openBroker(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	pr := &pointRun{h: h, pt: pt, st: newStream(pt.wc, records)}
	b.Cleanup(pr.close)
	in, err := pr.input(records)
	if err != nil {
		b.Fatal(err)
	}
	s := runSpec{pt: pt, topic: in.topic, ends: in.ends, batch: 2000}
	if model {
		s.exp = pr.expect(in)
	}
	return &benchEnv{h: h, spec: s, in: in}
}

func (e *benchEnv) run(b *testing.B, k kind) {
	b.Helper()
	var total, cpu float64
	s := e.spec
	s.kind = k
	for b.Loop() {
		r, err := e.h.measure(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		total += r.ThroughputRPS
		cpu += r.CPUs
	}
	b.ReportMetric(total/float64(b.N), "rec/s")
	// The process's CPU per input record over the run (consumer group
	// join included; the broker's too, in-process): steadier than rec/s on
	// a shared machine, and what a CPU-bound consumer's throughput follows.
	var records int64
	for _, n := range s.ends {
		records += n
	}
	b.ReportMetric(cpu*1e9/float64(b.N)/float64(records), "cpu-ns/rec")
}

// endToEnd prepares an end-to-end Run test (skipped with -short, as
// why says): the real cluster DIFFERENTIAL_TEST_BROKERS names (nil: the
// embedded broker), a temporary directory, and a JSON report path named
// file in a folder of it that does not exist yet.
func endToEnd(t *testing.T, why, file string) (brokers []string, dir, jsonPath string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	if env := os.Getenv(testbroker.EnvBrokers); env != "" {
		brokers = strings.Split(env, ",")
	}
	dir = t.TempDir()
	return brokers, dir, filepath.Join(dir, "results", file)
}

func workloadB() point {
	return point{name: "B", wc: baseWorkload(1, 8, 0), workers: 64}
}

func workloadA() point {
	return point{name: "A", wc: baseWorkload(1, 8, defaultCost), workers: 64}
}

// BenchmarkWorkloadB_Chain, _Strongest and _Design6: workload B (no cost) on
// the embedded broker, 50,000 records; rec/s is the design's throughput.
func BenchmarkWorkloadB_Chain(b *testing.B)     { benchDesign(b, workloadB(), 50_000, kindChain) }
func BenchmarkWorkloadB_Strongest(b *testing.B) { benchDesign(b, workloadB(), 50_000, kindStrongest) }
func BenchmarkWorkloadB_Design6(b *testing.B)   { benchDesign(b, workloadB(), 50_000, kindDesign6) }

// benchDesign runs design k on n records of pt's stream (the micro-batch
// baseline at its default batch of 500).
func benchDesign(b *testing.B, pt point, n int, k kind) {
	e := newBenchEnv(b, pt, n, true)
	if k == kindDesign6 {
		e.spec.batch = 500
	}
	e.run(b, k)
}

// BenchmarkWorkloadB_Floor: B's CPU floor on the embedded broker, 50,000
// records: each iteration one pass of every part (CPUFloor). cpu-ns/rec is
// the floor, comparable with the designs' cpu-ns/rec above; bound-rec/s is
// GOMAXPROCS ÷ the floor.
func BenchmarkWorkloadB_Floor(b *testing.B) {
	e := newBenchEnv(b, workloadB(), 50_000, false)
	var sum floorParts
	for b.Loop() {
		p, err := e.h.floorPass(context.Background(), e.spec.pt, e.in)
		if err != nil {
			b.Fatal(err)
		}
		sum.consume += p.consume
		sum.decode += p.decode
		sum.process += p.process
		sum.produce += p.produce
	}
	n := float64(b.N)
	floor := float64(sum.consume+sum.decode+sum.process+sum.produce) / n
	b.ReportMetric(floor, "cpu-ns/rec")
	b.ReportMetric(float64(sum.consume)/n, "consume-ns/rec")
	b.ReportMetric(float64(sum.decode)/n, "decode-ns/rec")
	b.ReportMetric(float64(sum.process)/n, "process-ns/rec")
	b.ReportMetric(float64(sum.produce)/n, "produce-ns/rec")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0))*1e9/floor, "bound-rec/s")
}

// BenchmarkWorkloadA_Chain, _Strongest and _Design6: workload A (I/O-bound,
// skewed), 4,000 records.
func BenchmarkWorkloadA_Chain(b *testing.B)     { benchDesign(b, workloadA(), 4_000, kindChain) }
func BenchmarkWorkloadA_Strongest(b *testing.B) { benchDesign(b, workloadA(), 4_000, kindStrongest) }
func BenchmarkWorkloadA_Design6(b *testing.B)   { benchDesign(b, workloadA(), 4_000, kindDesign6) }

// BenchmarkCeiling_Raw and _NoopChain: a plain sarama consumer group and the
// one-stage no-op chain over 100,000 records.
func BenchmarkCeiling_Raw(b *testing.B) {
	newBenchEnv(b, workloadB(), 100_000, false).run(b, kindRaw)
}

func BenchmarkCeiling_NoopChain(b *testing.B) {
	newBenchEnv(b, workloadB(), 100_000, false).run(b, kindNoop)
}

// BenchmarkPollingFallback: workload B with a 32-record handoff buffer, so
// followers poll Kafka themselves.
func BenchmarkPollingFallback(b *testing.B) {
	newBenchEnv(b, workloadB(), 50_000, true).run(b, kindPolling)
}

// newDefaultsEnv is benchEnv at the engine's defaults: the chain
// checkpoints and commits every second (chain.WithCommitInterval's
// default), on an input long enough for several checkpoints of every
// partition; the micro-batch runs batches of batch records.
func newDefaultsEnv(b *testing.B, records, batch int) *benchEnv {
	b.Helper()
	o := Options{Quick: true}.withDefaults()
	o.CommitInterval = time.Second
	c, err := openBroker(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	pt := workloadB()
	pr := &pointRun{h: h, pt: pt, st: newStream(pt.wc, records)}
	b.Cleanup(pr.close)
	in, err := pr.input(records)
	if err != nil {
		b.Fatal(err)
	}
	s := runSpec{pt: pt, topic: in.topic, ends: in.ends, batch: batch, exp: pr.expect(in)}
	return &benchEnv{h: h, spec: s}
}

// BenchmarkWorkloadB1s_Chain and _Strongest: workload B, 400,000 records,
// the chain at its default 1 s commit interval against the strongest
// micro-batch at the batch size the full benchmark's sweep picks on this
// machine (32,000 records: a batch about every 0.4 s, so it is durable at
// least as often). cpu-ns/rec is the figure to compare.
func BenchmarkWorkloadB1s_Chain(b *testing.B) { newDefaultsEnv(b, 400_000, 2000).run(b, kindChain) }

// BenchmarkWorkloadB1s_ChainKeyConcurrency2: the same, the chain's stages
// with 2 key workers each instead of W (Options.KeyConcurrency).
func BenchmarkWorkloadB1s_ChainKeyConcurrency2(b *testing.B) {
	e := newDefaultsEnv(b, 400_000, 2000)
	e.h.o.KeyConcurrency = 2
	e.run(b, kindChain)
}

// BenchmarkWorkloadB1s_ChainBuffer65536: the same with a handoff buffer of
// 65,536 records per partition instead of chain.DefaultBufferSize, so the
// followers do not fall out of it on this backlog and poll Kafka
// themselves: what the fallback's second fetch and decode cost.
func BenchmarkWorkloadB1s_ChainBuffer65536(b *testing.B) { benchChainBuffer(b, 400_000, 65536) }

// benchChainBuffer is the chain of BenchmarkWorkloadB1s_Chain on records
// input records with a handoff buffer of buffer records per partition.
func benchChainBuffer(b *testing.B, records, buffer int) {
	e := newDefaultsEnv(b, records, 2000)
	e.h.o.BufferSize = buffer
	e.run(b, kindChain)
}

func BenchmarkWorkloadB1s_Strongest(b *testing.B) {
	newDefaultsEnv(b, 400_000, 32_000).run(b, kindStrongest)
}

// BenchmarkWorkloadB1s_ChainAsOfReads: BenchmarkWorkloadB1s_Chain with the
// followers' reads made as of their records' horizons (chain.WithAsOfReads),
// which the attribution chain does not need: what the store's versions cost.
func BenchmarkWorkloadB1s_ChainAsOfReads(b *testing.B) {
	e := newDefaultsEnv(b, 400_000, 2000)
	e.h.o.asOfReads = true
	e.run(b, kindChain)
}

// BenchmarkWorkloadB1sLong_Chain and _Strongest: BenchmarkWorkloadB1s_ChainBuffer65536
// and _Strongest on three times the input (150,000 records per
// partition), to show how each design's CPU per record changes with the
// length of the input.
func BenchmarkWorkloadB1sLong_Chain(b *testing.B) { benchChainBuffer(b, 1_200_000, 65536) }

func BenchmarkWorkloadB1sLong_Strongest(b *testing.B) {
	newDefaultsEnv(b, 1_200_000, 32_000).run(b, kindStrongest)
}

// BenchmarkWorkloadB1s_ChainAtLeastOnce and _ChainExactlyOnce: the chain of
// BenchmarkWorkloadB1s_Chain wired as `differential run` is (a changelog;
// exactly-once: a Transactor instead of the producer), the exactly-once
// cost table's cells at 1 s on the embedded broker.
func BenchmarkWorkloadB1s_ChainAtLeastOnce(b *testing.B) {
	benchGuarantee(b, GuaranteeAtLeastOnce)
}

func BenchmarkWorkloadB1s_ChainExactlyOnce(b *testing.B) {
	benchGuarantee(b, GuaranteeExactlyOnce)
}

func benchGuarantee(b *testing.B, g string) {
	e := newDefaultsEnv(b, 400_000, 2000)
	e.spec.variant = &chainVariant{name: g, gate: e.h.o.Gate, commitInterval: time.Second, guarantee: g}
	e.run(b, kindChain)
}
