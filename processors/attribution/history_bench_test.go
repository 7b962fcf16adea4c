//go:build linux

package attribution_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// BenchmarkProcessorHistory measures one record of each processor
// (Sequence and Process, with the Pebble store on disk) for keys that
// already have a history of 10 or of 10,000 events inside the windows: as
// many clicks within the lookback and as many installs within the
// retention, persisted by a checkpoint. A record's cost must not depend on
// it: compare the two sub-benchmarks of a processor.
//
// Both sizes hold the same 200,000 events in the store (10,000 keys with a
// history of 10, or 10 keys with a history of 10,000), so only the
// history per key differs. Iteration i processes a new record of key
// i mod keys, at a new offset, a microsecond after the previous one; a
// key's history grows by 10% at most with the benchtime below. Every 1,000
// iterations, outside the timer, everything is checkpointed (about what
// the chain persists at a time).
//
// ns/op is wall time, which on a shared machine includes waiting for a
// CPU and Pebble's background compactions of the history; cpu-ns/op is the
// benchmark thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, the goroutine
// locked to its thread): the processors' and the store's work for the
// record, the figure to compare.
//
//	go test -run XXX -bench ProcessorHistory -benchtime 10000x ./processors/attribution/
func BenchmarkProcessorHistory(b *testing.B) {
	for _, typ := range []string{attribution.TypeClick, attribution.TypeInstall, attribution.TypePurchase} {
		for _, h := range []int{10, 10_000} {
			b.Run(fmt.Sprintf("%s/history=%d", typ, h), func(b *testing.B) { benchHistory(b, typ, h) })
		}
	}
}

// historyEvents is the number of events in the store before the timer
// starts, whatever the history per key.
const historyEvents = 200_000

func benchHistory(b *testing.B, typ string, history int) {
	cfg := attribution.DefaultConfig()
	db, err := store.OpenPebble(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	stages := attribution.Chain(cfg)
	names := []string{stages[0].Name, stages[1].Name, stages[2].Name}
	ps, err := db.OpenPartition("events", 0, names)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()

	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	var off int64
	ids := 0
	run := func(k int, e *attribution.Event, at time.Time) {
		ev := &chain.Event{Record: chain.Record{Topic: "events", Offset: off, Key: []byte(e.UserID)},
			Decoded: chain.Decoded{Type: e.Type, Time: e.Time, Payload: e}}
		pc := chain.NewContext(chain.ContextOptions{Topic: "events", Stage: names[k], Offset: off, StreamTime: at,
			EvictionWatermark: t0.Add(-24 * time.Hour), State: ps.Stage(k)})
		skip, err := stages[k].Processor.(chain.Sequencer).Sequence(pc, ev)
		if err != nil {
			b.Fatal(err)
		}
		if !skip {
			if err := stages[k].Processor.Process(context.Background(), pc, ev); err != nil {
				b.Fatal(err)
			}
		}
		off++
	}
	event := func(typ, user string, at time.Time) *attribution.Event {
		ids++
		e := &attribution.Event{EventID: fmt.Sprintf("%s%d", typ[:1], ids), Type: typ, UserID: user, Time: at}
		switch typ {
		case attribution.TypeClick:
			e.CampaignID, e.Channel = "cmp-7", "search"
		case attribution.TypePurchase:
			e.RevenueText, e.Currency = "4.99", "USD"
		}
		return e
	}
	checkpoint := func() {
		cps := make([]commit.Checkpoint, len(names))
		for i, n := range names {
			cps[i] = commit.Checkpoint{Stage: n, Next: off}
		}
		if err := ps.Checkpoint(cps, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
	// The histories: per key, clicks over the six days and installs over
	// the 29 days before t0 (inside the lookback and the retention at t0).
	keys := historyEvents / (2 * history)
	users := make([]string, keys)
	for u := range users {
		users[u] = fmt.Sprintf("u%d", u)
	}
	for i := range history {
		at := t0.Add(-6 * 24 * time.Hour).Add(time.Duration(i) * 6 * 24 * time.Hour / time.Duration(history))
		for _, u := range users {
			run(0, event(attribution.TypeClick, u, at), at)
		}
		if off%10_000 < int64(keys) {
			checkpoint()
		}
	}
	for i := range history {
		at := t0.Add(-29 * 24 * time.Hour).Add(time.Duration(i) * 29 * 24 * time.Hour / time.Duration(history))
		for _, u := range users {
			run(1, event(attribution.TypeInstall, u, at), t0)
		}
		if off%10_000 < int64(keys) {
			checkpoint()
		}
	}
	checkpoint()

	k := map[string]int{attribution.TypeClick: 0, attribution.TypeInstall: 1, attribution.TypePurchase: 2}[typ]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	b.ResetTimer()
	start := threadCPU()
	for i := range b.N {
		at := t0.Add(time.Duration(i) * time.Microsecond)
		run(k, event(typ, users[i%keys], at), at)
		if (i+1)%1000 == 0 {
			b.StopTimer()
			cpu += threadCPU() - start
			checkpoint()
			start = threadCPU()
			b.StartTimer()
		}
	}
	cpu += threadCPU() - start
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(history), "history")
}

// threadCPU is the calling thread's CPU time (Linux).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}
