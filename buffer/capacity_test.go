package buffer

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
