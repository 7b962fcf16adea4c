package attribution_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// BenchmarkStageProcessors measures what one stage's processor costs per
// record it handles, on workload B's input (the shape of `differential
// bench`'s B: 50,000 records, 8 partitions, Zipf users over 10,000 keys,
// half of the journeys on 2 hot partitions): Sequence and Process of every
// valid record the stage accepts, in offset order, through the in-memory
// store with a checkpoint (persist + evict) every 1,024 records — the
// processor and state cost without the engine's or Kafka's. The click and
// velocity stages handle the same records (the clicks), so their costs per
// click compare directly; per record divides by every input record. The
// cost is the process's CPU time (getrusage), which a machine shared with
// other work inflates less than wall time.
func BenchmarkStageProcessors(b *testing.B) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users = 50_000, 8, 10_000
	wc.ZipfS, wc.HotPartitions, wc.HotFrac = 1.1, 2, 0.5
	wc.MaxRecordBytes = 16 << 10
	split := workload.Split(workload.Generate(wc), wc.Partitions)
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	cfg.Velocity = attribution.DefaultVelocity(time.Hour)
	stages := attribution.Chain(cfg)
	dec := attribution.Decoder(cfg)
	names := make([]string, len(stages))
	for i, s := range stages {
		names[i] = s.Name
	}
	type rec struct {
		ev chain.Event
		s  time.Time
	}
	parts := make([][]rec, len(split))
	for p, recs := range split {
		var s time.Time
		for i := range recs {
			d, err := dec.Decode(&recs[i])
			parts[p] = append(parts[p], rec{chain.Event{Record: recs[i], Decoded: d, Err: err}, s})
			if err == nil && d.Time.After(s) {
				s = d.Time
			}
		}
	}
	for k, st := range stages {
		if st.Name != attribution.StageClick && st.Name != attribution.StageVelocity {
			continue
		}
		b.Run(st.Name, func(b *testing.B) {
			handled := 0
			cpu0 := cpuTime()
			for b.Loop() {
				mem := store.NewMemory()
				handled = 0
				for p, recs := range parts {
					ps, err := mem.OpenPartition("events", int32(p), names)
					if err != nil {
						b.Fatal(err)
					}
					cps := make([]commit.Checkpoint, len(names))
					for i, r := range recs {
						if r.ev.Err == nil && st.Filter(&r.ev) {
							handled++
							pc := chain.NewContext(chain.ContextOptions{Topic: "events", Partition: int32(p), Stage: st.Name,
								Offset: r.ev.Offset, StreamTime: r.s, EvictionWatermark: r.s, State: ps.Stage(k)})
							skip, err := st.Processor.(chain.Sequencer).Sequence(pc, &r.ev)
							if err == nil && !skip {
								err = st.Processor.Process(context.Background(), pc, &r.ev)
							}
							if err != nil {
								b.Fatal(err)
							}
						}
						if i%1024 == 1023 || i == len(recs)-1 {
							for j := range cps {
								cps[j] = commit.Checkpoint{Stage: names[j], Next: r.ev.Offset + 1, Watermark: r.s.UnixNano()}
							}
							if err := ps.Checkpoint(cps, r.s.Add(-1)); err != nil {
								b.Fatal(err)
							}
						}
					}
					_ = ps.Close()
				}
				_ = mem.Close()
			}
			per := float64((cpuTime() - cpu0).Nanoseconds()) / float64(b.N)
			b.ReportMetric(per/float64(handled), "cpu-ns/click")
			b.ReportMetric(per/float64(wc.Records), "cpu-ns/record")
		})
	}
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
