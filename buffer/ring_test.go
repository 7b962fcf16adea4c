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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type rec struct {
	off int64
	val string
}

func recOffset(r *rec) int64 { return r.off }

func recs(offs ...int64) []rec {
	out := make([]rec, len(offs))
	for i, o := range offs {
		out[i] = rec{off: o, val: "v"}
	}
	return out
}

func offsets(rs []rec) []int64 {
	out := make([]int64, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.off)
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func read(t *testing.T, r *Ring[rec], from int64, n int, pacer bool) []int64 {
	t.Helper()
	got, err := r.TryRead(from, make([]rec, 0, n), pacer)
	require.NoError(t, err)
	return offsets(got)
}

func TestAppendReadGaps(t *testing.T) {
	r := New(8, 10, recOffset)
	assert.Equal(t, int64(10), r.Low())
	assert.Equal(t, int64(10), r.High())
	assert.Equal(t, 0, r.Len())
	assert.Equal(t, 8, r.Cap())

	require.NoError(t, r.Append(t.Context(), recs(10, 12, 13, 17)))
	assert.Equal(t, int64(10), r.Low())
	assert.Equal(t, int64(18), r.High())
	assert.Equal(t, 4, r.Len())

	assert.Equal(t, []int64{10, 12, 13, 17}, read(t, r, 10, 10, false))
	assert.Equal(t, []int64{12, 13, 17}, read(t, r, 11, 10, false), "from inside a gap")
	assert.Equal(t, []int64{12, 13, 17}, read(t, r, 12, 10, false))
	assert.Equal(t, []int64{17}, read(t, r, 14, 10, false))
	assert.Equal(t, []int64{10, 12}, read(t, r, 10, 2, false), "limited by cap(dst)")
	assert.Empty(t, read(t, r, 18, 10, false), "nothing yet")

	got, err := r.TryRead(12, nil, false)
	require.NoError(t, err)
	assert.Equal(t, []int64{12}, offsets(got), "no spare capacity: one item")

	dst := append(make([]rec, 0, 4), rec{off: -1})
	got, err = r.Read(t.Context(), 13, dst, false)
	require.NoError(t, err)
	assert.Equal(t, []int64{-1, 13, 17}, offsets(got), "appends to dst")
	assert.Equal(t, "v", got[1].val, "items are copied whole")
}

func TestWrapAround(t *testing.T) {
	r := New(5, 0, recOffset)
	var want []int64
	for o := int64(0); o < 40; o += 3 {
		require.NoError(t, r.Append(t.Context(), recs(o, o+2)))
		want = append(want, o, o+2)
		read(t, r, o+3, 1, true) // the pacer has read everything
		if len(want) > 5 {
			want = want[len(want)-5:]
		}
		assert.Equal(t, want, read(t, r, r.Low(), 8, false))
		assert.Equal(t, want[1:], read(t, r, want[0]+1, 8, false))
	}
}

func TestEvictionAndCovered(t *testing.T) {
	r := New(4, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(0, 1, 2, 3)))
	assert.Equal(t, []int64{0, 1, 2, 3}, read(t, r, 0, 10, true))
	read(t, r, 4, 10, true) // the pacer moves past 3 (TryRead records it too)

	// Full of read items: the append evicts exactly as many as it needs.
	require.NoError(t, r.Append(t.Context(), recs(5, 7)))
	assert.Equal(t, int64(2), r.Low(), "after evicting 1, Low is 2")
	assert.Equal(t, int64(8), r.High())
	assert.Equal(t, 4, r.Len())

	_, err := r.TryRead(1, nil, false)
	require.ErrorIs(t, err, ErrEvicted)
	var ee *EvictedError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, EvictedError{From: 1, Low: 2}, *ee)
	_, err = r.Read(t.Context(), 0, make([]rec, 0, 4), false)
	require.ErrorIs(t, err, ErrEvicted, "Read does not block when evicted")

	assert.False(t, covered(r, 1))
	assert.True(t, covered(r, 2))
	assert.True(t, covered(r, 8))
	assert.True(t, covered(r, 100), "offsets above High are covered (Read waits)")
	assert.Equal(t, []int64{2, 3, 5, 7}, read(t, r, 2, 10, false))

	// The slot freed by reading is reused lazily: no eviction while there is room.
	r2 := New(4, 0, recOffset)
	require.NoError(t, r2.Append(t.Context(), recs(0, 1)))
	read(t, r2, 2, 1, true)
	require.NoError(t, r2.Append(t.Context(), recs(2, 3)))
	assert.Equal(t, int64(0), r2.Low())
	assert.Equal(t, uint64(0), r2.Stats().Evicted)

	// Eviction across a gap: Low is last evicted + 1, inside the gap.
	r3 := New(2, 0, recOffset)
	require.NoError(t, r3.Append(t.Context(), recs(0, 5)))
	read(t, r3, 6, 1, true)
	require.NoError(t, r3.Append(t.Context(), recs(9)))
	assert.Equal(t, int64(1), r3.Low())
	assert.True(t, covered(r3, 1))
	assert.Equal(t, []int64{5, 9}, read(t, r3, 1, 4, false))
}

func TestAppendOrder(t *testing.T) {
	r := New(4, 10, recOffset)
	require.ErrorIs(t, r.Append(t.Context(), recs(9)), ErrOrder, "below start")
	require.ErrorIs(t, r.Append(t.Context(), recs(10, 12, 12)), ErrOrder)
	require.ErrorIs(t, r.Append(t.Context(), recs(12, 11)), ErrOrder)
	assert.Equal(t, 0, r.Len(), "a bad batch appends nothing")
	require.NoError(t, r.Append(t.Context(), recs(10, 12)))
	require.ErrorIs(t, r.Append(t.Context(), recs(12)), ErrOrder, "below High")
	require.NoError(t, r.Append(t.Context(), nil))
	assert.Equal(t, []int64{10, 12}, read(t, r, 0+10, 4, false))
}

// TestReadAheadLimit: with LimitReadAhead(n) the writer runs at most n
// unread items ahead of the pacer, while read items stay for the readers
// behind it up to the capacity.
func TestReadAheadLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(8, 0, recOffset)
		r.LimitReadAhead(3)
		done := make(chan error, 1)
		go func() { done <- r.Append(t.Context(), recs(span(0, 10)...)) }()
		synctest.Wait()
		assert.Empty(t, done, "three unread items: the writer waits")
		assert.Equal(t, int64(3), r.High())
		read(t, r, 50, 4, false) // a follower reading on releases nothing
		synctest.Wait()
		assert.Equal(t, int64(3), r.High())

		assert.Equal(t, []int64{0, 1}, read(t, r, 0, 2, true))
		assert.Equal(t, []int64{2}, read(t, r, 2, 8, true)) // records 0, 1 read
		synctest.Wait()
		assert.Equal(t, int64(5), r.High(), "two read: two more appended")
		assert.Equal(t, []int64{2, 3, 4}, read(t, r, 2, 8, true))
		synctest.Wait()
		assert.Equal(t, int64(5), r.High(), "reading 2..4 is recorded at the next read")
		assert.Empty(t, read(t, r, 5, 8, true))
		synctest.Wait()
		assert.Equal(t, []int64{5, 6, 7}, read(t, r, 5, 8, true))
		assert.Equal(t, int64(0), r.Low(), "read items stay while there is room")
		assert.Empty(t, read(t, r, 8, 8, true))
		synctest.Wait()
		require.NoError(t, <-done)
		assert.Equal(t, int64(10), r.High())
		assert.Equal(t, int64(2), r.Low(), "eviction only when the capacity is reached")
		assert.Equal(t, []int64{2, 3, 4, 5, 6, 7, 8, 9}, read(t, r, 2, 8, false))

		// Raising the limit wakes a waiting writer.
		go func() { done <- r.Append(t.Context(), recs(span(10, 14)...)) }()
		synctest.Wait()
		assert.Equal(t, int64(11), r.High(), "8, 9, 10 unread: the limit")
		r.LimitReadAhead(100) // clamped to the capacity
		synctest.Wait()
		require.NoError(t, <-done)
		assert.Equal(t, int64(14), r.High())
	})
}

// TestDiscard: items below a cursor every reader passed are evicted at once
// (slots zeroed), never an unread one; reads above still see every item.
func TestDiscard(t *testing.T) {
	r := New(8, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(0, 1, 3, 4, 6)))
	r.Discard(4) // nothing read by the pacer yet: nothing goes
	assert.Equal(t, int64(0), r.Low())
	assert.Equal(t, []int64{0, 1, 3, 4, 6}, read(t, r, 0, 8, true))
	read(t, r, 7, 8, true) // the pacer read everything below 7
	r.Discard(4)
	assert.Equal(t, int64(4), r.Low())
	assert.Equal(t, 2, r.Len())
	assert.Equal(t, []int64{4, 6}, read(t, r, 4, 8, false))
	_, err := r.TryRead(3, nil, false)
	require.ErrorIs(t, err, ErrEvicted)
	for i, it := range r.mu.buf {
		if it.off < 4 {
			assert.Equal(t, rec{}, it, "slot %d zeroed", i)
		}
	}
	covered, room := r.Room(6)
	assert.True(t, covered)
	assert.Equal(t, 7, room, "6 free slots, and item 4 below 6")
	covered, _ = r.Room(3)
	assert.False(t, covered)
	// Wrapping, and a cursor past High.
	require.NoError(t, r.Append(t.Context(), recs(span(7, 13)...)))
	read(t, r, 100, 1, true)
	r.Discard(100)
	assert.Equal(t, int64(13), r.Low())
	assert.Equal(t, int64(13), r.High())
	assert.Zero(t, r.Len())
	assert.Equal(t, make([]rec, 8), r.mu.buf)
	require.NoError(t, r.Append(t.Context(), recs(13)))
	assert.Equal(t, []int64{13}, read(t, r, 13, 8, false))
}

// TestGrowsOnDemand: the backing array starts small and doubles only while
// the ring must hold more items; items and their order survive the growth.
func TestGrowsOnDemand(t *testing.T) {
	r := New(4096, 0, recOffset)
	assert.Len(t, r.mu.buf, initialSlots)
	// A pacer that keeps up and discards what it read: no growth.
	for o := int64(0); o < 5000; o += 100 {
		require.NoError(t, r.Append(t.Context(), recs(span(o, o+100)...)))
		assert.Equal(t, span(o, o+100), read(t, r, o, 100, true))
		read(t, r, o+100, 1, true)
		r.Discard(o + 100)
	}
	assert.Len(t, r.mu.buf, initialSlots)
	// Read items kept for a slow reader: it grows, wrapping items move in
	// order.
	require.NoError(t, r.Append(t.Context(), recs(span(5000, 5200)...)))
	read(t, r, 5200, 1, true)
	require.NoError(t, r.Append(t.Context(), recs(span(5200, 6000)...)))
	assert.Len(t, r.mu.buf, 1024)
	assert.Equal(t, int64(5000), r.Low())
	assert.Equal(t, span(5000, 6000), read(t, r, 5000, 2000, false))
}

func TestAppendWaitsForPacerOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(4, 0, recOffset)
		require.NoError(t, r.Append(t.Context(), recs(0, 1, 2, 3)))

		done := make(chan error, 1)
		go func() { done <- r.Append(t.Context(), recs(span(4, 12)...)) }()
		synctest.Wait()
		assert.Empty(t, done, "full of unread items: the writer waits")
		assert.Equal(t, int64(4), r.High())

		// Non-pacer readers do not release the writer, however far they read.
		read(t, r, 0, 4, false)
		read(t, r, 100, 4, false)
		synctest.Wait()
		assert.Empty(t, done)

		// The pacer reads 0 and 1; its next Read (from 2) records that, and
		// the writer appends 4 and 5 over them, then waits again.
		assert.Equal(t, []int64{0, 1}, read(t, r, 0, 2, true))
		assert.Equal(t, int64(4), r.High(), "reading 0,1 is recorded at the next read")
		assert.Equal(t, []int64{2, 3}, read(t, r, 2, 10, true))
		synctest.Wait()
		assert.Empty(t, done)
		assert.Equal(t, int64(2), r.Low())
		assert.Equal(t, int64(6), r.High())

		// A pacer Read that must wait records its progress first, so the
		// writer goes on and the pacer wakes with the new items.
		got := make(chan []int64, 1)
		go func() {
			items, err := r.Read(t.Context(), 6, make([]rec, 0, 10), true)
			assert.NoError(t, err)
			got <- offsets(items)
		}()
		synctest.Wait()
		assert.Equal(t, []int64{6, 7, 8, 9}, <-got)
		assert.Empty(t, done, "8..11 still need the pacer to read 6..9")
		read(t, r, 10, 1, true)
		synctest.Wait()
		require.NoError(t, <-done)
		assert.Equal(t, int64(12), r.High())
		assert.Equal(t, int64(8), r.Low())
		assert.Positive(t, r.Stats().WriterWaits)
	})
}

func TestCloseDrainsThenErrors(t *testing.T) {
	r := New(4, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(0, 2, 3)))
	r.Close(io.EOF)
	r.Close(errors.New("second close is ignored"))

	got, err := r.Read(t.Context(), 1, make([]rec, 0, 1), false)
	require.NoError(t, err)
	assert.Equal(t, []int64{2}, offsets(got))
	got, err = r.Read(t.Context(), 3, make([]rec, 0, 4), false)
	require.NoError(t, err)
	assert.Equal(t, []int64{3}, offsets(got))
	_, err = r.Read(t.Context(), 4, nil, false)
	require.ErrorIs(t, err, io.EOF)
	_, err = r.TryRead(4, nil, true)
	require.ErrorIs(t, err, io.EOF)
	require.ErrorIs(t, r.Append(t.Context(), recs(4)), ErrClosed)
	require.ErrorIs(t, r.Append(t.Context(), nil), ErrClosed)
	assert.Equal(t, int64(4), r.High())

	r2 := New(4, 0, recOffset)
	r2.Close(nil)
	_, err = r2.TryRead(0, nil, false)
	require.ErrorIs(t, err, ErrClosed, "Close(nil) means ErrClosed")
}

func TestCloseWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(2, 0, recOffset)
		readErr := make(chan error, 1)
		go func() {
			_, err := r.Read(t.Context(), 0, nil, false)
			readErr <- err
		}()
		synctest.Wait()
		require.NoError(t, r.Append(t.Context(), recs(0, 1)))
		require.NoError(t, <-readErr, "the append wakes the reader")

		appendErr := make(chan error, 1)
		go func() { appendErr <- r.Append(t.Context(), recs(2)) }()
		go func() {
			_, err := r.Read(t.Context(), 5, nil, false)
			readErr <- err
		}()
		changed := r.Changed()
		synctest.Wait()
		assert.Empty(t, appendErr)
		assert.Empty(t, readErr)

		r.Close(io.EOF)
		synctest.Wait()
		require.ErrorIs(t, <-appendErr, ErrClosed)
		require.ErrorIs(t, <-readErr, io.EOF)
		assert.True(t, isClosed(changed))
		assert.True(t, isClosed(r.Changed()), "after Close, Changed is closed")
	})
}

func TestContextEndsWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(1, 0, recOffset)
		ctx, cancel := context.WithCancel(t.Context())
		readErr := make(chan error, 1)
		go func() {
			_, err := r.Read(ctx, 0, nil, true)
			readErr <- err
		}()
		synctest.Wait()
		assert.Empty(t, readErr)
		cancel()
		synctest.Wait()
		require.ErrorIs(t, <-readErr, context.Canceled)

		// The pacer's cancelled Read recorded nothing (from 0), so the ring
		// stays full of unread items and the writer waits until its deadline.
		require.NoError(t, r.Append(t.Context(), recs(0)))
		start := time.Now()
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := r.Append(ctx, recs(1, 2))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, int64(1), r.High())
	})
}

func TestChanged(t *testing.T) {
	r := New(4, 0, recOffset)
	ch := r.Changed()
	assert.True(t, ch == r.Changed(), "shared until the next change")
	assert.False(t, isClosed(ch))
	require.NoError(t, r.Append(t.Context(), nil))
	assert.False(t, isClosed(ch), "an empty Append changes nothing")
	require.NoError(t, r.Append(t.Context(), recs(0)))
	assert.True(t, isClosed(ch))
	ch2 := r.Changed()
	assert.False(t, ch == ch2)
	assert.False(t, isClosed(ch2))
}

func TestLastAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(4, 0, recOffset)
		assert.True(t, r.LastAppend().IsZero())
		t0 := time.Now() // fake time
		require.NoError(t, r.Append(t.Context(), recs(0)))
		assert.Equal(t, t0, r.LastAppend())
		time.Sleep(time.Minute)
		require.NoError(t, r.Append(t.Context(), nil))
		assert.Equal(t, t0, r.LastAppend(), "an empty Append is not an append")
		require.NoError(t, r.Append(t.Context(), recs(1)))
		assert.Equal(t, t0.Add(time.Minute), r.LastAppend())
	})
	assert.Panics(t, func() { New(0, 0, recOffset) })
	assert.Panics(t, func() { New[rec](1, 0, nil) })
}

// TestNoAllocs: the steady state (append, pacer and follower reads into
// buffers with capacity, nobody waiting) does not allocate.
func TestNoAllocs(t *testing.T) {
	r := New(64, 0, recOffset)
	batch := recs(span(0, 8)...)
	dst := make([]rec, 0, 16)
	var next int64
	allocs := testing.AllocsPerRun(1000, func() {
		for i := range batch {
			batch[i].off = next + int64(i)
		}
		if err := r.Append(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(context.Background(), next, dst[:0], true)
		if err != nil || len(got) != 8 {
			t.Fatal(err, len(got))
		}
		if _, err = r.TryRead(r.Low(), dst[:0], false); err != nil {
			t.Fatal(err)
		}
		next += 8
		_, _ = r.TryRead(next, dst[:0], true)
	})
	assert.Zero(t, allocs)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A pacer that starts ahead of the ring (the first stage resumes further
// than the slowest stage, where the ring starts) has read everything below
// its cursor: one Append of more than a ring's worth must evict and go on
// up to the pacer instead of waiting for a pacer move that never comes
// (the pacer waits for exactly those items). Regression: the chain stalled
// after restarts that left the first stage more than a buffer ahead.
func TestAppendBelowAPacerAheadNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(4, 0, recOffset)
		got := make(chan []int64, 1)
		go func() {
			items, err := r.Read(t.Context(), 10, make([]rec, 0, 4), true)
			assert.NoError(t, err)
			got <- offsets(items)
		}()
		synctest.Wait() // the pacer waits at 10
		done := make(chan error, 1)
		go func() { done <- r.Append(t.Context(), recs(span(0, 14)...)) }()
		synctest.Wait()
		assert.Equal(t, []int64{10, 11, 12, 13}, <-got)
		require.NoError(t, <-done)
		assert.Equal(t, int64(14), r.High())
		assert.Equal(t, int64(10), r.Low())
	})
}

// fill writes items into a reservation (a, then b) and returns how many.
func fill(a, b []rec, items []rec) int {
	n := copy(a, items)
	return n + copy(b, items[n:])
}

// Reserve hands out the slots after the last item, wrapping around the
// array's end (b non-empty); readers see them only after Commit, which
// zeroes what was reserved and not committed.
func TestReserveCommit(t *testing.T) {
	r := New(4, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(0, 1, 2)))
	read(t, r, 3, 1, true) // the pacer has read 0..2
	a, b, err := r.Reserve(t.Context(), 3)
	require.NoError(t, err)
	require.Len(t, a, 1, "the free slot before the array's end")
	require.Len(t, b, 2, "then two evicted slots at its start")
	assert.Equal(t, int64(2), r.Low(), "0 and 1 evicted for the reservation")
	require.Equal(t, 3, fill(a, b, recs(5, 6, 7)))
	assert.Empty(t, read(t, r, 3, 8, false), "not visible before Commit")
	assert.Equal(t, int64(3), r.High())
	require.NoError(t, r.Commit(2))
	assert.Equal(t, int64(7), r.High())
	assert.Equal(t, []int64{2, 5, 6}, read(t, r, 0+2, 8, false))
	assert.Zero(t, b[1], "the slot reserved and not committed is zeroed")

	// The next reservation starts after the last committed item.
	read(t, r, 7, 1, true)
	a, b, err = r.Reserve(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, 1, fill(a, b, recs(9)))
	require.NoError(t, r.Commit(1))
	assert.Equal(t, []int64{5, 6, 9}, read(t, r, 3, 8, false))
	assert.Equal(t, int64(10), r.High())

	a, b, err = r.Reserve(t.Context(), 0)
	require.NoError(t, err)
	assert.Empty(t, a)
	assert.Empty(t, b)
	require.NoError(t, r.Commit(0))
}

// A reservation whose items are out of order, or below High, or that the
// ring closed under, appends nothing and is zeroed.
func TestCommitRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items []rec
		close bool
		want  error
	}{
		{"decreasing", recs(12, 11), false, ErrOrder},
		{"below high", recs(9, 11), false, ErrOrder},
		{"across the wrap", recs(12, 11, 13), false, ErrOrder},
		{"closed", recs(11, 12), true, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(4, 0, recOffset)
			require.NoError(t, r.Append(t.Context(), recs(8, 9)))
			read(t, r, 10, 1, true)
			require.NoError(t, r.Append(t.Context(), recs(10)))
			a, b, err := r.Reserve(t.Context(), len(tc.items))
			require.NoError(t, err)
			require.Equal(t, len(tc.items), fill(a, b, tc.items))
			if tc.close {
				r.Close(nil)
			}
			require.ErrorIs(t, r.Commit(len(tc.items)), tc.want)
			assert.Equal(t, int64(11), r.High(), "nothing appended")
			for _, s := range append(a, b...) {
				assert.Zero(t, s, "refused slots are zeroed")
			}
			got, err := r.TryRead(10, make([]rec, 0, 8), false)
			assert.Equal(t, []int64{10}, offsets(got))
			if !tc.close {
				require.NoError(t, err)
				a, b, err := r.Reserve(t.Context(), 1)
				require.NoError(t, err)
				fill(a, b, recs(11))
				require.NoError(t, r.Commit(1), "the writer goes on after a refusal")
			}
		})
	}
}

// Reserve waits, like Append, while the ring is full of unread items, and
// returns at the pacer's read, a context's end or Close.
func TestReserveWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(2, 0, recOffset)
		require.NoError(t, r.Append(t.Context(), recs(0, 1)))
		got := make(chan int, 1)
		go func() {
			a, b, err := r.Reserve(t.Context(), 2)
			if err != nil {
				t.Error(err)
			}
			got <- fill(a, b, recs(2, 3))
			if err := r.Commit(len(a) + len(b)); err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait()
		require.Empty(t, got, "full of unread items: Reserve waits")
		read(t, r, 1, 1, true) // the pacer read 0
		assert.Equal(t, 1, <-got, "room for one")
		synctest.Wait()
		assert.Equal(t, int64(3), r.High())

		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, _, err := r.Reserve(ctx, 1); errc <- err }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)

		go func() { _, _, err := r.Reserve(t.Context(), 1); errc <- err }()
		synctest.Wait()
		r.Close(io.EOF)
		require.ErrorIs(t, <-errc, ErrClosed)
	})
}

// Readers and Discard run while the writer fills a reservation (for -race:
// nothing but the writer touches reserved slots).
func TestReserveConcurrentReaders(t *testing.T) {
	r := New(64, 0, recOffset)
	const total = 20_000
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst := make([]rec, 0, 16)
		var cursor int64
		for cursor < total {
			got, err := r.Read(t.Context(), cursor, dst[:0], true)
			if err != nil {
				t.Error(err)
				return
			}
			for _, it := range got {
				if it.off != cursor || it.val != "v" {
					t.Errorf("read %+v at cursor %d", it, cursor)
					return
				}
				cursor++
			}
			r.Discard(cursor)
		}
	}()
	var next int64
	for next < total {
		a, b, err := r.Reserve(t.Context(), int(min(total-next, 7)))
		require.NoError(t, err)
		k := 0
		for _, s := range [][]rec{a, b} {
			for i := range s {
				s[i] = rec{off: next, val: "v"}
				next++
				k++
			}
		}
		require.NoError(t, r.Commit(k))
	}
	<-done
}

func TestReserveNoAllocs(t *testing.T) {
	r := New(64, 0, recOffset)
	dst := make([]rec, 0, 16)
	var next int64
	allocs := testing.AllocsPerRun(1000, func() {
		a, b, err := r.Reserve(context.Background(), 8)
		if err != nil || len(a)+len(b) != 8 {
			t.Fatal(err, len(a)+len(b))
		}
		for i := range 8 {
			s := &a[0]
			if i < len(a) {
				s = &a[i]
			} else {
				s = &b[i-len(a)]
			}
			*s = rec{off: next + int64(i)}
		}
		if err := r.Commit(8); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(context.Background(), next, dst[:0], true); err != nil {
			t.Fatal(err)
		}
		next += 8
		_, _ = r.TryRead(next, dst[:0], true)
	})
	assert.Zero(t, allocs)
}

// View hands the pacer the ring's own slots (no copy), up to the limit and
// the array's end, and counts as the pacer's read like Read(pacer=true).
func TestView(t *testing.T) {
	r := New(4, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(0, 1, 2)))
	v, err := r.View(t.Context(), 0, 2)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1}, offsets(v), "up to the limit")
	v[1].val = "seen" // the pacer may write its view
	v, err = r.View(t.Context(), 1, 8)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2}, offsets(v))
	assert.Equal(t, "seen", v[0].val, "the ring's own slot")
	require.NoError(t, r.Append(t.Context(), recs(3, 4)), "0 was read by the pacer: evicted for 4")
	assert.Equal(t, int64(1), r.Low())
	v, err = r.View(t.Context(), 3, 8)
	require.NoError(t, err)
	assert.Equal(t, []int64{3}, offsets(v), "no further than the array's end")
	v, err = r.View(t.Context(), 4, 8)
	require.NoError(t, err)
	assert.Equal(t, []int64{4}, offsets(v), "then from the array's start")

	_, err = r.View(t.Context(), 0, 8)
	require.ErrorIs(t, err, ErrEvicted)
	r.Close(io.EOF)
	_, err = r.View(t.Context(), 5, 8)
	require.ErrorIs(t, err, io.EOF)
}

// View waits for an item like Read.
func TestViewWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(4, 0, recOffset)
		got := make(chan []int64, 1)
		go func() {
			v, err := r.View(t.Context(), 0, 8)
			if err != nil {
				t.Error(err)
			}
			got <- offsets(v)
		}()
		synctest.Wait()
		require.Empty(t, got)
		require.NoError(t, r.Append(t.Context(), recs(0, 1)))
		assert.Equal(t, []int64{0, 1}, <-got)
	})
}

// The writer appends (and would grow the array) while the pacer writes the
// slots of its view: the array is not copied under the pacer (for -race),
// and every item arrives once, in order, as the writer wrote it.
func TestViewWhileWriterGrows(t *testing.T) {
	r := New(4096, 0, recOffset)
	const total = 50_000
	done := make(chan struct{})
	go func() {
		defer close(done)
		var cursor int64
		for cursor < total {
			v, err := r.View(t.Context(), cursor, 64)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range v {
				if v[i].off != cursor || v[i].val != "v" {
					t.Errorf("viewed %+v at cursor %d", v[i], cursor)
					return
				}
				v[i].val = "processed"
				cursor++
			}
			r.Discard(cursor)
		}
	}()
	var next int64
	for next < total {
		k := int(min(total-next, 1+next%97))
		a, b, err := r.Reserve(t.Context(), k)
		require.NoError(t, err)
		n := 0
		for _, s := range [][]rec{a, b} {
			for i := range s {
				s[i] = rec{off: next, val: "v"}
				next++
				n++
			}
		}
		require.NoError(t, r.Commit(n))
	}
	<-done
}

// TestSetCapacityLowered: a ring of 1024 grown to hold 1000 items (read by
// the pacer, kept for a slower reader) is lowered to 100. No item leaves
// until the writer appends; then read items are evicted down to the new
// capacity before any is taken, the backing array shrinks to it once the
// items fit, and the ring never again holds more than 100.
func TestSetCapacityLowered(t *testing.T) {
	r := New(1024, 0, recOffset)
	require.NoError(t, r.Append(t.Context(), recs(span(0, 1000)...)))
	read(t, r, 0, 1000, true)
	read(t, r, 1000, 1, true) // the pacer has read everything
	require.Len(t, r.mu.buf, 1024)

	r.SetCapacity(100)
	assert.Equal(t, 100, r.Cap())
	assert.Equal(t, 1000, r.Len(), "lowering drops nothing by itself")
	assert.Equal(t, int64(0), r.Low())

	require.NoError(t, r.Append(t.Context(), recs(1000)))
	assert.Equal(t, 100, r.Len(), "read items evicted down to the capacity, then one taken")
	assert.Equal(t, int64(901), r.Low())
	assert.Len(t, r.mu.buf, 100, "the array shrank to the capacity")
	assert.Equal(t, span(901, 1001), read(t, r, 901, 200, false), "the newest items stay, in order")

	for o := int64(1001); o < 1500; o += 50 {
		read(t, r, o, 1, true)
		require.NoError(t, r.Append(t.Context(), recs(span(o, o+50)...)))
		assert.LessOrEqual(t, r.Len(), 100)
	}
	assert.Len(t, r.mu.buf, 100)
}

// TestSetCapacityKeepsUnreadItems: lowered below the unread items it holds,
// a ring drops none of them: the writer waits until the pacer has read
// enough for the ring to be back at the new capacity.
func TestSetCapacityKeepsUnreadItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(16, 0, recOffset)
		require.NoError(t, r.Append(t.Context(), recs(span(0, 10)...)))
		r.SetCapacity(4)
		done := make(chan error, 1)
		go func() { done <- r.Append(t.Context(), recs(10)) }()
		synctest.Wait()
		assert.Empty(t, done, "10 unread items, capacity 4: the writer waits")
		assert.Equal(t, span(0, 10), read(t, r, 0, 10, false), "nothing unread was dropped")

		read(t, r, 0, 6, true)
		read(t, r, 6, 1, true) // the pacer has read 0..5: 4 unread remain
		synctest.Wait()
		assert.Empty(t, done, "back at the capacity with unread items only: still waiting")
		read(t, r, 6, 1, true)
		read(t, r, 7, 1, true) // 6 read
		synctest.Wait()
		require.NoError(t, <-done)
		assert.Equal(t, 4, r.Len())
		assert.Equal(t, int64(7), r.Low())
	})
}

// TestSetCapacityRaised: a raised capacity lets the writer hold more, and
// the read-ahead limit follows the capacity up to what LimitReadAhead asked.
func TestSetCapacityRaised(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(4, 0, recOffset)
		r.LimitReadAhead(8)
		require.NoError(t, r.Append(t.Context(), recs(span(0, 4)...)))
		done := make(chan error, 1)
		go func() { done <- r.Append(t.Context(), recs(span(4, 8)...)) }()
		synctest.Wait()
		assert.Empty(t, done, "full of unread items")
		r.SetCapacity(8)
		synctest.Wait()
		require.NoError(t, <-done, "the raised capacity and read-ahead take the rest")
		assert.Equal(t, 8, r.Len())

		r.SetCapacity(64)
		done2 := make(chan error, 1)
		go func() { done2 <- r.Append(t.Context(), recs(8)) }()
		synctest.Wait()
		assert.Empty(t, done2, "the read-ahead limit (8) still holds the writer")
	})
}

// TestHandoffExact is DESIGN I2 at the buffer's level: one writer appends a
// log with random offset gaps in random batches; a pacer and two slow
// readers read it. The slow readers stall (waiting for the writer to get
// far ahead), get evicted, "poll Kafka" (read the source-of-truth log at
// their cursor) until Room(cursor) reports it covered, then go back to the ring. Every
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
			polling = !covered(rd.r, cursor)
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

// covered is whether a reader at from can read from r.
func covered(r *Ring[rec], from int64) bool {
	ok, _ := r.Room(from)
	return ok
}
