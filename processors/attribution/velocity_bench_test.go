package attribution_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// BenchmarkVelocityStageCost runs workload B's input (the shape of
// `differential bench`'s B: 50,000 records, 8 partitions, Zipf users over
// 10,000 keys, half of the journeys on 2 hot partitions, no simulated cost)
// through the attribution chain with no Kafka (chaintest, Pebble state on
// disk), once without and once with the velocity stage (window 1h, the
// defaults) per iteration, alternating so that both see the same machine
// load, and reports each one's CPU time (the process's, all goroutines) and
// wall time per record and the differences: the velocity stage's cost per
// input record in the engine. CPU time is the figure to read on a shared
// machine.
func BenchmarkVelocityStageCost(b *testing.B) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users = 50_000, 8, 10_000
	wc.ZipfS, wc.HotPartitions, wc.HotFrac = 1.1, 2, 0.5
	wc.MaxRecordBytes = 16 << 10
	split := workload.Split(workload.Generate(wc), wc.Partitions)
	plain := attribution.DefaultConfig()
	plain.MaxRecordBytes = wc.MaxRecordBytes
	vel := plain
	vel.Velocity = attribution.DefaultVelocity(time.Hour)
	parts := make([]int32, wc.Partitions)
	for p := range parts {
		parts[p] = int32(p)
	}
	run := func(cfg attribution.Config) (wall, cpu time.Duration) {
		db, err := store.OpenPebble(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		tt := chaintest.New(b, attribution.Chain(cfg), attribution.Decoder(cfg),
			chain.WithStore(db), chain.WithIdleTimeout(time.Millisecond))
		tt.DiscardOutputs()
		for p := range split {
			tt.Append(int32(p), split[p]...)
		}
		start, cpu0 := time.Now(), cpuTime()
		tt.Start(parts...)
		tt.WaitIdle()
		wall, cpu = time.Since(start), cpuTime()-cpu0
		if err := tt.Stop(); err != nil {
			b.Fatal(err)
		}
		if tt.OutputCount("output") == 0 {
			b.Fatal("no outputs")
		}
		return wall, cpu
	}
	var wPlain, wVel, cPlain, cVel time.Duration
	for range b.N {
		w, c := run(plain)
		wPlain, cPlain = wPlain+w, cPlain+c
		w, c = run(vel)
		wVel, cVel = wVel+w, cVel+c
	}
	n := float64(b.N * wc.Records)
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
	b.ReportMetric(per(cPlain), "plain-cpu-ns/record")
	b.ReportMetric(per(cVel), "velocity-cpu-ns/record")
	b.ReportMetric(per(cVel-cPlain), "added-cpu-ns/record")
	b.ReportMetric(per(wPlain), "plain-wall-ns/record")
	b.ReportMetric(per(wVel-wPlain), "added-wall-ns/record")
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
