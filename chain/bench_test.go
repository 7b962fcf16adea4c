package chain_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

var noop = chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })

// cheapDecoder gives every record the same type and an increasing time
// without parsing, so the benchmark measures the engine, not decoding.
var cheapDecoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	return chain.Decoded{Type: "x", Time: r.Timestamp}, nil
})

func noopStages(n int) []chain.Stage {
	st := make([]chain.Stage, n)
	for i := range st {
		st[i] = chain.Stage{Name: fmt.Sprintf("s%d", i), Processor: noop}
	}
	return st
}

func benchRecords(n int) []chain.Record {
	recs := make([]chain.Record, n)
	key := []byte("k")
	for i := range recs {
		recs[i] = chain.Record{Key: key, Value: key, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
	}
	return recs
}

// BenchmarkChainStages measures the engine's cost per record for chains of
// 1, 2 and 4 no-op stages over one partition (the in-memory source, no
// Kafka). The per-stage cost is the slope between them; ns/op and allocs/op
// are per record.
func BenchmarkChainStages(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("stages=%d", n), func(b *testing.B) {
			recs := benchRecords(b.N)
			tt := chaintest.New(b, noopStages(n), cheapDecoder, chain.WithBufferSize(8192), chain.WithBatchSize(256), chain.WithIdleTimeout(time.Millisecond))
			tt.Log(0).SetMaxBatch(512)
			tt.Log(0).Append(recs...)
			tt.Measure(b)
		})
	}
}

// BenchmarkChainHeapFlat feeds 20x the buffer size through a 3-stage chain and
// reports the live heap after 2x and after 20x: bounded memory (DESIGN I9)
// means the two are about equal (records are kept by the in-memory log
// itself, so the log is excluded by feeding it in rounds and truncating).
func BenchmarkChainHeapFlat(b *testing.B) {
	const bufSize = 4096
	for range b.N {
		tt := chaintest.New(b, noopStages(3), cheapDecoder, chain.WithBufferSize(bufSize), chain.WithIdleTimeout(time.Millisecond))
		tt.Start(0)
		var after2, after20 uint64
		for round := range 20 {
			tt.Feed(0, benchRecords(bufSize)...)
			tt.Log(0).Truncate()
			if round == 1 || round == 19 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if round == 1 {
					after2 = ms.HeapAlloc
				} else {
					after20 = ms.HeapAlloc
				}
			}
		}
		if err := tt.Stop(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(after2)/(1<<20), "heapMB@2x")
		b.ReportMetric(float64(after20)/(1<<20), "heapMB@20x")
	}
}

// BenchmarkChainExtraStage reports what one more no-op stage costs per
// record (the target: ≤ 150 ns and ≤ 1 allocation): each iteration
// runs b.N records through a one-stage and a four-stage chain, alternating
// which goes first, and reports (time₄ − time₁) ÷ 3 and (mallocs₄ −
// mallocs₁) ÷ 3 per record as ns/extra-stage and allocs/extra-stage, and
// the process's CPU time the same way as cpu-ns/extra-stage. On a loaded
// machine run it with -count and compare minima.
func BenchmarkChainExtraStage(b *testing.B) {
	recs := benchRecords(b.N)
	var cpu [5]time.Duration
	run := func(n int) (time.Duration, uint64) {
		tt := chaintest.New(b, noopStages(n), cheapDecoder, chain.WithBufferSize(8192), chain.WithBatchSize(256), chain.WithIdleTimeout(time.Millisecond))
		tt.Log(0).SetMaxBatch(512)
		tt.Log(0).Append(recs...)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start, cpu0 := time.Now(), processCPU()
		tt.Start(0)
		tt.WaitIdle()
		d := time.Since(start)
		cpu[n] += processCPU() - cpu0
		runtime.ReadMemStats(&after)
		if err := tt.Stop(); err != nil {
			b.Fatal(err)
		}
		return d, after.Mallocs - before.Mallocs
	}
	b.ResetTimer()
	var d [5]time.Duration
	var m [5]uint64
	for _, order := range [][2]int{{1, 4}, {4, 1}} {
		for _, n := range order {
			dn, mn := run(n)
			d[n], m[n] = d[n]+dn, m[n]+mn
		}
	}
	b.StopTimer()
	per := float64(2 * 3 * b.N)
	b.ReportMetric(float64(d[4]-d[1])/per, "ns/extra-stage")
	b.ReportMetric((float64(m[4])-float64(m[1]))/per, "allocs/extra-stage")
	b.ReportMetric(float64(d[1])/float64(2*b.N), "ns/record@1-stage")
	b.ReportMetric(float64(cpu[1])/float64(2*b.N), "cpu-ns/record@1-stage")
	// CPU time (user + system, the whole process) is less sensitive to
	// other processes on a shared machine than wall time.
	b.ReportMetric(float64(cpu[4]-cpu[1])/per, "cpu-ns/extra-stage")
}

// BenchmarkKeyParallelCPU: 4 partitions of a 3-stage chain, each stage
// key-parallel with 64 workers under a chain-wide worker cap of 64 (the
// benchmark's chain), 256 keys, each record a fixed computation of a few
// microseconds and no waiting: the shape of workload B. cpu-ns/record (the
// whole process) less work-ns/record (the same computation timed alone,
// three stages) is what the engine costs per record on work that never
// waits: the key workers' hand-overs, the gate, begin and complete.
func BenchmarkKeyParallelCPU(b *testing.B) {
	const parts, keys = 4, 256
	spin := chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
		spinSink.Add(spinWork(uint64(e.Offset)))
		return nil
	})
	st := make([]chain.Stage, 3)
	for i := range st {
		st[i] = chain.Stage{Name: fmt.Sprintf("s%d", i), Processor: spin, KeyConcurrency: 64, Gate: chain.GateKey}
	}
	tt := chaintest.New(b, st, cheapDecoder, chain.WithWorkerCap(64), chain.WithIdleTimeout(time.Millisecond))
	per := b.N/parts + 1
	for p := range int32(parts) {
		recs := make([]chain.Record, per)
		for i := range recs {
			k := []byte(fmt.Sprintf("k%d", (i*7919)%keys))
			recs[i] = chain.Record{Key: k, Value: k, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		}
		tt.Log(p).Append(recs...)
	}
	runtime.GC()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	tt.Start(0, 1, 2, 3)
	tt.WaitIdle()
	cpu, wall := processCPU()-cpu0, time.Since(start)
	b.StopTimer()
	n := float64(parts * per)
	t0 := time.Now()
	for i := range 10_000 {
		spinSink.Add(spinWork(uint64(i)))
	}
	work := 3 * float64(time.Since(t0)) / 10_000
	b.ReportMetric(float64(cpu)/n, "cpu-ns/record")
	b.ReportMetric(work, "work-ns/record")
	b.ReportMetric(n/wall.Seconds(), "records/s")
	if err := tt.Stop(); err != nil {
		b.Fatal(err)
	}
}

var spinSink atomic.Uint64

// spinWork is a few microseconds of computation the compiler cannot drop.
func spinWork(x uint64) uint64 {
	for range 4000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}
