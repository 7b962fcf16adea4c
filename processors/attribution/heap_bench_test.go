package attribution_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// BenchmarkAttributionHeapFlat runs the attribution chain (Pebble state on
// disk, in-memory partitions) over 1,000,000 records, fed in ten 100,000-
// record segments that continue each other in event time (same users), and
// reports records/s and the live heap after 100k, 300k and 1M records.
// The logs are truncated after each segment (like retention), so what stays
// is the engine's and the store's own memory: bounded by the windows, it
// must not grow with the input (DESIGN I9) once the longest window
// (InstallRetention, 30 days: the first segment covers 21 days) is full.
func BenchmarkAttributionHeapFlat(b *testing.B) {
	const segments, perSegment, partitions = 10, 100_000, 4
	for range b.N {
		cfg := attribution.DefaultConfig()
		cfg.MaxRecordBytes = 16 << 10
		db, err := store.OpenPebble(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		tt := chaintest.NewWith(b, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChain(cfg, o...) },
			chain.WithStore(db), chain.WithIdleTimeout(10*time.Millisecond))
		tt.DiscardOutputs()
		parts := make([]int32, partitions)
		for p := range parts {
			parts[p] = int32(p)
		}
		tt.Start(parts...)
		heap := func() float64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return float64(ms.HeapAlloc) / (1 << 20)
		}
		var first, third, last float64
		var busy time.Duration
		for seg := range segments {
			wc := workload.DefaultConfig()
			wc.Records, wc.Partitions, wc.Seed = perSegment, partitions, uint64(seg+1)
			wc.MaxRecordBytes = cfg.MaxRecordBytes
			wc.Start = wc.Start.Add(time.Duration(seg) * wc.Span)
			split := workload.Split(workload.Generate(wc), partitions)
			start := time.Now()
			for p := range split {
				tt.Append(int32(p), split[p]...)
			}
			split = nil
			tt.WaitIdle()
			busy += time.Since(start)
			for _, p := range parts {
				tt.Log(p).Truncate()
			}
			switch seg {
			case 0:
				first = heap()
			case 2:
				third = heap()
			case segments - 1:
				last = heap()
			}
		}
		if err := tt.Stop(); err != nil {
			b.Fatal(err)
		}
		_ = db.Close()
		b.ReportMetric(float64(segments*perSegment)/busy.Seconds(), "records/s")
		b.ReportMetric(first, "heapMB@100k")
		b.ReportMetric(third, "heapMB@300k")
		b.ReportMetric(last, "heapMB@1M")
		if tt.OutputCount("output") == 0 {
			b.Fatal("no outputs")
		}
	}
}
