package buffer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
)

// benchRec is shaped like chain.Record (about 120 bytes), so copy costs are
// realistic.
type benchRec struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []struct{ Key, Value []byte }
	Timestamp time.Time
}

func benchOffset(r *benchRec) int64 { return r.Offset }

// BenchmarkAppendRead: one writer and three readers (reader 0 the pacer) on
// one ring; b.N is the number of records, so ns/op is ns per record through
// the ring (one append, three reads). Followers that get evicted jump to
// Low() and count an eviction.
func BenchmarkAppendRead(b *testing.B) {
	for _, c := range []struct{ capacity, batch int }{
		{1024, 1}, {1024, 64}, {4096, 256}, {4096, 1024},
	} {
		b.Run(fmt.Sprintf("cap=%d/batch=%d", c.capacity, c.batch), func(b *testing.B) {
			benchAppendRead(b, c.capacity, c.batch)
		})
	}
}

func benchAppendRead(b *testing.B, capacity, batchSize int) {
	ctx := context.Background()
	r := New(capacity, 0, benchOffset)
	batch := make([]benchRec, batchSize)
	val := make([]byte, 200)
	for i := range batch {
		batch[i] = benchRec{Topic: "events", Key: val[:8], Value: val}
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		evictions int
		got       [3]int
	)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range 3 {
		wg.Go(func() {
			dst := make([]benchRec, 0, batchSize)
			var cursor int64
			n, ev := 0, 0
			for {
				items, err := r.Read(ctx, cursor, dst[:0], i == 0)
				n += len(items)
				if len(items) > 0 {
					cursor = items[len(items)-1].Offset + 1
				}
				if errors.Is(err, ErrEvicted) {
					ev++
					cursor = r.Low()
				} else if err != nil {
					break
				}
			}
			mu.Lock()
			evictions += ev
			got[i] = n
			mu.Unlock()
		})
	}
	var off int64
	for left := b.N; left > 0; {
		k := min(left, batchSize)
		for j := range k {
			batch[j].Offset = off
			off++
		}
		if err := r.Append(ctx, batch[:k]); err != nil {
			b.Fatal(err)
		}
		left -= k
	}
	r.Close(io.EOF)
	wg.Wait()
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if got[0] != b.N {
		b.Fatalf("pacer read %d of %d", got[0], b.N)
	}
	st := r.Stats()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/item")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/item")
	b.ReportMetric(float64(evictions)/float64(b.N), "evictions/item")
	b.ReportMetric(float64(st.WriterWaits+st.ReaderWaits)/float64(b.N), "waits/item")
}

// BenchmarkRead is one uncontended Read of 256 records from the middle of a
// full ring (binary search + copy); ns/op is per Read.
func BenchmarkRead(b *testing.B) {
	r := New(4096, 0, benchOffset)
	batch := make([]benchRec, 4096)
	for i := range batch {
		batch[i].Offset = int64(i) * 2 // gaps everywhere
	}
	if err := r.Append(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	dst := make([]benchRec, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var err error
		if dst, err = r.Read(context.Background(), int64(i%7000), dst[:0], false); err != nil {
			b.Fatal(err)
		}
	}
}
