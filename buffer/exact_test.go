package buffer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandoffExact is DESIGN I2 at the buffer's level: one writer appends a
// log with random offset gaps in random batches; a pacer and two slow
// readers read it. The slow readers stall (waiting for the writer to get
// far ahead), get evicted, "poll Kafka" (read the source-of-truth log at
// their cursor) until Covers(cursor) holds, then go back to the ring. Every
// reader must see every offset exactly once, in order.
func TestHandoffExact(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 30
	}
	var total exactStats
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			st := runExact(t, uint64(seed))
			total.evictions += st.evictions
			total.polled += st.polled
			total.writerWaits += st.writerWaits
		})
	}
	// The test is only meaningful if both fallbacks happened.
	assert.Positive(t, total.evictions, "no reader was ever evicted")
	assert.Positive(t, total.polled, "no record was ever polled")
	assert.Positive(t, total.writerWaits, "the writer never waited for the pacer")
	t.Logf("evictions %d, polled %d, writer waits %d", total.evictions, total.polled, total.writerWaits)
}

type exactStats struct {
	evictions, polled, writerWaits uint64
}

func runExact(t *testing.T, seed uint64) (st exactStats) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	start := int64(rng.IntN(100))
	log := make([]rec, 200+rng.IntN(1800))
	off := start
	for i := range log {
		off += int64(rng.IntN(3)) // gaps of 0..2, also before the first record
		log[i] = rec{off: off}
		off++
	}
	want := offsets(log)
	final := off // High() once the whole log is appended
	capacity := 1 + rng.IntN(40)

	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		r := New(capacity, start, recOffset)

		go func(rng *rand.Rand) {
			for rest := log; len(rest) > 0; {
				k := min(len(rest), 1+rng.IntN(2*capacity))
				if rng.IntN(2) == 0 {
					// In place (the chain's fetcher): reserve k, fill
					// a prefix of what was granted, the readers running
					// in between.
					a, b, err := r.Reserve(ctx, k)
					if err != nil {
						t.Errorf("reserve: %v", err)
						return
					}
					got := len(a) + len(b)
					if got < 1 || got > k {
						t.Errorf("reserved %d slots of %d asked", got, k)
						return
					}
					k = 1 + rng.IntN(got)
					n := copy(a, rest[:k])
					copy(b, rest[n:k])
					runtime.Gosched()
					if err := r.Commit(k); err != nil {
						t.Errorf("commit: %v", err)
						return
					}
				} else if err := r.Append(ctx, rest[:k]); err != nil {
					t.Errorf("append: %v", err)
					return
				}
				rest = rest[k:]
			}
			r.Close(io.EOF)
		}(rand.New(rand.NewPCG(rng.Uint64(), 1)))

		type result struct {
			name    string
			got     []int64
			evicted uint64
			polled  uint64
		}
		results := make(chan result, 3)
		for i, name := range []string{"pacer", "slow1", "slow2"} {
			rd := &exactReader{
				t: t, r: r, log: log, final: final, start: start,
				pacer: i == 0,
				rng:   rand.New(rand.NewPCG(rng.Uint64(), uint64(i))),
				dst:   make([]rec, 0, 1+rng.IntN(2*capacity)),
			}
			go func() {
				rd.run(ctx)
				results <- result{name, rd.got, rd.evicted, rd.polled}
			}()
		}
		for range 3 {
			res := <-results
			require.Equal(t, want, res.got, "reader %s (seed %d)", res.name, seed)
			if res.name == "pacer" {
				assert.Zero(t, res.evicted, "the pacer is never evicted")
			}
			st.evictions += res.evicted
			st.polled += res.polled
		}
		assert.LessOrEqual(t, r.Len(), capacity)
		st.writerWaits = r.Stats().WriterWaits
	})
	return st
}

// exactReader is a stage's reading loop as the chain runs it: ring reads,
// and polling mode when evicted.
type exactReader struct {
	t            *testing.T
	r            *Ring[rec]
	log          []rec // what Kafka holds: the source of truth for polling
	start, final int64
	pacer        bool
	rng          *rand.Rand
	dst          []rec

	got             []int64
	evicted, polled uint64
}

func (rd *exactReader) run(ctx context.Context) {
	cursor := rd.start
	polling := false
	for {
		if polling {
			cursor = rd.poll(cursor)
			polling = !rd.r.Covers(cursor)
			continue
		}
		rd.dawdle(ctx, cursor)
		items, err := rd.r.Read(ctx, cursor, rd.dst[:0], rd.pacer)
		for _, it := range items {
			rd.got = append(rd.got, it.off)
			cursor = it.off + 1
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrEvicted):
			rd.evicted++
			polling = true
		case errors.Is(err, io.EOF):
			return
		default:
			rd.t.Errorf("read: %v", err)
			return
		}
	}
}

// poll reads a few records of the log at cursor, like a Kafka poller, and
// returns the new cursor.
func (rd *exactReader) poll(cursor int64) int64 {
	i := sort.Search(len(rd.log), func(i int) bool { return rd.log[i].off >= cursor })
	// Polling only happens below Low, and Low-1 was a record of the log.
	if i == len(rd.log) {
		rd.t.Errorf("polling at %d past the log's end", cursor)
		return rd.final
	}
	k := min(len(rd.log)-i, 1+rd.rng.IntN(8))
	for _, it := range rd.log[i : i+k] {
		rd.got = append(rd.got, it.off)
	}
	rd.polled += uint64(k)
	return rd.log[i+k-1].off + 1
}

// dawdle makes the reader slow in ways that exercise the ring's edges. The
// pacer sometimes waits until every other goroutine is blocked (so the
// writer fills the ring and waits for it); a slow reader sometimes waits
// until the writer is far ahead of it (so it gets evicted).
func (rd *exactReader) dawdle(ctx context.Context, cursor int64) {
	switch n := rd.rng.IntN(8); {
	case rd.pacer && n == 0:
		synctest.Wait() // only the pacer calls Wait, so never concurrently
	case rd.pacer:
	case n == 0:
		target := min(cursor+int64(rd.rng.IntN(4*rd.r.Cap()+2)), rd.final)
		for {
			ch := rd.r.Changed() // before the check, so no Append is missed
			if rd.r.High() >= target {
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	case n < 3:
		runtime.Gosched()
	}
}
