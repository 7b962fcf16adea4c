package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
)

// BenchmarkRestoreBatch measures the store half of a restore: changelog
// records applied to an empty Pebble store in the batches Restore makes
// (restoreBatchBytes), one Restore call per fetch-sized slice of records,
// then FinishRestore. One op is one entry. Records: distinct keys of 20-odd
// bytes, 60-byte values with an expiry (an index entry each).
func BenchmarkRestoreBatch(b *testing.B) {
	for _, size := range []int{512 << 10, 2 << 20, 8 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("batch=%dKiB", size>>10), func(b *testing.B) {
			defer func(old int) { restoreBatchBytes = old }(restoreBatchBytes)
			restoreBatchBytes = size
			db, err := OpenPebble(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ps, err := db.OpenPartition("bench", 0, []string{"s"})
			if err != nil {
				b.Fatal(err)
			}
			cs := ps.(chain.ChangelogStore)
			exp := expiryNanos(time.Unix(1_900_000_000, 0))
			value := changelogValue(appendValue(nil, exp, make([]byte, 60)))
			const perFetch = 75_000 // an 8 MB fetch of such records
			recs := make([]chain.ChangelogRecord, 0, perFetch)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				recs = append(recs, chain.ChangelogRecord{Offset: int64(i), Key: fmt.Appendf(nil, "c/user-%07d#%08d", i%700_000, i), Value: value})
				if len(recs) == perFetch || i == b.N-1 {
					if err := cs.Restore(recs, int64(i+1)); err != nil {
						b.Fatal(err)
					}
					recs = recs[:0]
				}
			}
			if err := cs.FinishRestore(nil, int64(b.N)); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			wall := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			cpu := float64((cpuTime() - cpu0).Nanoseconds()) / float64(b.N)
			b.ReportMetric(1e9/wall, "entries/s")
			b.ReportMetric(1e9/cpu, "entries/cpu-s")
		})
	}
}
