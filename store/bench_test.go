package store

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// benchStores lists the implementations side by side; the Pebble one is on
// a real temp dir, so every checkpoint pays a real fsync.
var benchStores = []struct {
	name string
	open func(b *testing.B) (chain.Store, func())
}{
	{"pebble", func(b *testing.B) (chain.Store, func()) {
		db, err := OpenPebble(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return db, func() { _ = db.Close() }
	}},
	{"memory", func(b *testing.B) (chain.Store, func()) {
		m := NewMemory()
		return m, func() { _ = m.Close() }
	}},
}

// BenchmarkCheckpointUpdates measures state updates per second with batched
// synced checkpoints: one stage Sets 1000 keys (16-byte keys, 100-byte
// values, each with an expiry, so each update also writes an index entry)
// and then checkpoints them. With evict=true every checkpoint also evicts
// what expired, as the chain does: in steady state each update is later
// evicted once (one point lookup to rule out a stale index entry, and two
// deletions). One op is one update, including its share of the checkpoint.
//
// Metrics: ns/update and updates/s are wall time; cpu-ns/update and
// updates/cpu-s count the process's CPU time (getrusage), including
// Pebble's background flushes and compactions: the per-core figure, and the
// one that stays meaningful on a shared machine.
func BenchmarkCheckpointUpdates(b *testing.B) {
	const perCheckpoint = 1000
	for _, bs := range benchStores {
		for _, evict := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/evict=%v", bs.name, evict), func(b *testing.B) {
				st, closeStore := bs.open(b)
				defer closeStore()
				ps, err := st.OpenPartition("bench", 0, []string{"s"})
				if err != nil {
					b.Fatal(err)
				}
				ss := ps.Stage(0)
				key := make([]byte, 16)
				value := make([]byte, 100)
				base := time.Unix(1_800_000_000, 0)
				cps := []commit.Checkpoint{{Stage: "s"}}
				b.ReportAllocs()
				cpu0 := cpuTime()
				b.ResetTimer()
				for i := range b.N {
					copy(key, "user-")
					binary.BigEndian.PutUint64(key[8:], uint64(i)*7919%1_000_000)
					binary.BigEndian.PutUint64(value, uint64(i))
					// One update = 1 ms of event time; entries live 100 s.
					if err := ss.Set(int64(i), key, value, base.Add(time.Duration(i+100_000)*time.Millisecond)); err != nil {
						b.Fatal(err)
					}
					if (i+1)%perCheckpoint == 0 || i == b.N-1 {
						cps[0].Next = int64(i + 1)
						var evictBefore time.Time
						if evict {
							evictBefore = base.Add(time.Duration(i) * time.Millisecond)
						}
						if err := ps.Checkpoint(cps, evictBefore); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				wall := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				cpu := float64((cpuTime() - cpu0).Nanoseconds()) / float64(b.N)
				b.ReportMetric(wall, "ns/update")
				b.ReportMetric(1e9/wall, "updates/s")
				b.ReportMetric(cpu, "cpu-ns/update")
				b.ReportMetric(1e9/cpu, "updates/cpu-s")
			})
		}
	}
}

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetOverlay measures Get of keys that have a pending write (served
// from the overlay, no allocation).
func BenchmarkGetOverlay(b *testing.B) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) {
			st, closeStore := bs.open(b)
			defer closeStore()
			ps, err := st.OpenPartition("bench", 0, []string{"a", "b"})
			if err != nil {
				b.Fatal(err)
			}
			const n = 1024
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "user-%08d", i)
				if err := ps.Stage(0).Set(int64(i), keys[i], make([]byte, 100), time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			ss := ps.Stage(1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, ok, err := ss.Get(keys[i%n]); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkGetPersisted measures Get of checkpointed keys (overlay miss).
func BenchmarkGetPersisted(b *testing.B) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) {
			st, closeStore := bs.open(b)
			defer closeStore()
			ps, err := st.OpenPartition("bench", 0, []string{"a"})
			if err != nil {
				b.Fatal(err)
			}
			const n = 1024
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "user-%08d", i)
				if err := ps.Stage(0).Set(int64(i), keys[i], make([]byte, 100), time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := ps.Checkpoint([]commit.Checkpoint{{Next: n}}, time.Time{}); err != nil {
				b.Fatal(err)
			}
			ss := ps.Stage(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, ok, err := ss.Get(keys[i%n]); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
