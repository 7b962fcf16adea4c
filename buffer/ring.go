package buffer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Ring holds up to capacity items of type T in increasing offset order.
// offsetOf extracts an item's Kafka offset. See the package doc for the
// invariant and the concurrency contract.
type Ring[T any] struct {
	offsetOf func(*T) int64
	// capacity is written under mu and read under it or atomically (Cap):
	// SetCapacity changes it while the ring is in use.
	capacity atomic.Int64

	// The writer's reservation (Reserve, Commit): slots after the last
	// item, in order res[0] then res[1]; owned by the writer, no other
	// method touches them while they are reserved.
	res [2][]T

	mu struct {
		sync.Mutex
		// buf is the circular array, at most capacity long (it grows by
		// doubling, growLocked). Logical item
		// i (0 = oldest) is buf[(head+i) % len(buf)], for i < n.
		buf  []T
		head int
		n    int
		// low and high bound the covered offsets: [low, high).
		low, high int64
		// pacer is the pacer's cursor: every item with offset < pacer is read.
		pacer int64
		// viewing: the pacer holds a View of the array's slots, so the
		// array must not be copied (grown) until its next read.
		viewing bool
		// ahead bounds the unread items: aheadWant (LimitReadAhead;
		// capacity by default) clamped to capacity.
		ahead, aheadWant int
		lastAppend       time.Time
		closed           bool
		closeErr         error
		// changed is closed at the next Append that adds items or at Close.
		// nil when nobody asked for it, so an Append nobody waits for does
		// not allocate. After Close it is a closed channel that stays.
		changed chan struct{}
		// room is closed when the pacer moves on or at Close; nil unless the
		// writer waits for it.
		room  chan struct{}
		stats Stats
	}
}

// initialSlots is the backing array's first size (New).
const initialSlots = 256

// Stats are a Ring's counters since New.
type Stats struct {
	Appended    uint64 // items appended
	Evicted     uint64 // items evicted to make room
	WriterWaits uint64 // times Append waited for the pacer
	ReaderWaits uint64 // times a Read waited for an Append
	Evictions   uint64 // reads that failed with ErrEvicted
}

// New returns an empty ring of capacity items covering offsets from start
// (Low() == High() == start). It panics if capacity < 1 or offsetOf is nil.
// The backing array starts small and doubles when the ring must hold more
// items (never beyond capacity; it does not shrink): a ring whose readers
// keep up never holds, and the garbage collector never scans, more than
// what they have not read yet.
func New[T any](capacity int, start int64, offsetOf func(*T) int64) *Ring[T] {
	if capacity < 1 {
		panic(fmt.Sprintf("buffer: capacity %d < 1", capacity))
	}
	if offsetOf == nil {
		panic("buffer: nil offsetOf")
	}
	r := &Ring[T]{offsetOf: offsetOf}
	r.capacity.Store(int64(capacity))
	r.mu.buf = make([]T, min(capacity, initialSlots))
	r.mu.low, r.mu.high, r.mu.pacer = start, start, start
	r.mu.ahead, r.mu.aheadWant = capacity, capacity
	return r
}

// LimitReadAhead makes Append wait while the pacer has n unread items
// instead of capacity (n is clamped to [1, capacity]). The ring still keeps
// up to capacity items for the readers behind the pacer; only how far the
// writer runs ahead of the pacer shrinks. A writer far ahead fills the whole
// ring with items the pacer reads long after they were written (out of the
// cache by then), and items wait in the ring instead of upstream.
func (r *Ring[T]) LimitReadAhead(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.aheadWant = max(n, 1)
	r.mu.ahead = min(r.mu.aheadWant, r.capLocked())
	if r.mu.room != nil { // the writer may append more now
		close(r.mu.room)
		r.mu.room = nil
	}
}

// SetCapacity changes how many items the ring holds at most (n is clamped
// to at least 1), for a memory budget shared by several rings whose share
// changes. A larger capacity lets the writer append more at once. A
// smaller one holds the ring to n from the writer's next append: it
// evicts read items first, as a full ring does, and waits for the pacer
// while n unread items fill it; until then the items above n stay (none is
// dropped unread). The backing array shrinks to the new capacity at the
// writer's first append once the items fit, so the memory is released
// then. The read-ahead limit is clamped to the capacity.
func (r *Ring[T]) SetCapacity(n int) {
	n = max(n, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.capacity.Store(int64(n))
	r.mu.ahead = min(r.mu.aheadWant, n)
	if r.mu.room != nil { // the writer may append more now
		close(r.mu.room)
		r.mu.room = nil
	}
}

func (r *Ring[T]) capLocked() int { return int(r.capacity.Load()) }

// Append copies items into the ring. Their offsets must be strictly
// increasing and >= High(), else it returns an error wrapping ErrOrder and
// appends nothing. It appends as many items as fit, evicting the oldest items
// the pacer has read when the ring is full, and blocks while the ring holds
// capacity items the pacer has not read (offset >= the pacer's cursor). It
// returns ctx.Err() if ctx ends while waiting and ErrClosed if the ring is or
// gets closed; in both cases a prefix of items may have been appended (High()
// tells how far). Only the writer may call Append.
func (r *Ring[T]) Append(ctx context.Context, items []T) error {
	if err := r.checkOrder(items); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return ErrClosed
	}
	if len(items) == 0 {
		return nil
	}
	if first := r.offsetOf(&items[0]); first < r.mu.high {
		return fmt.Errorf("%w: offset %d below high %d", ErrOrder, first, r.mu.high)
	}
	for {
		k := r.appendLocked(items)
		items = items[k:]
		if len(items) == 0 {
			return nil
		}
		if k > 0 {
			// One call appends at most a ring's worth; the pacer may
			// already have read past what was just appended (it starts
			// ahead of the ring when the first stage resumes further than
			// the slowest one), so try again before waiting for it to move.
			continue
		}
		// Full of unread items (or at the read-ahead limit): wait for the
		// pacer.
		if r.mu.room == nil {
			r.mu.room = make(chan struct{})
		}
		r.mu.stats.WriterWaits++
		if err := r.waitLocked(ctx, r.mu.room); err != nil {
			return err
		}
		if r.mu.closed {
			return ErrClosed
		}
	}
}

// checkOrder reports whether items' offsets strictly increase. It reads only
// items, so it runs without the lock.
func (r *Ring[T]) checkOrder(items []T) error {
	for i := 1; i < len(items); i++ {
		prev, cur := r.offsetOf(&items[i-1]), r.offsetOf(&items[i])
		if cur <= prev {
			return fmt.Errorf("%w: offset %d after %d", ErrOrder, cur, prev)
		}
	}
	return nil
}

// appendLocked copies as many of items as fit without overwriting an unread
// item or holding more than the read-ahead limit of unread items, evicting
// read items as needed, and returns how many it copied.
func (r *Ring[T]) appendLocked(items []T) int {
	k := r.roomLocked(len(items))
	if k <= 0 {
		return 0
	}
	// The free region starts at the tail and may wrap.
	a, b := r.tailLocked(k)
	m := copy(a, items[:k])
	copy(b, items[m:k])
	r.publishLocked(k)
	return k
}

// roomLocked makes room for up to want more items — growing the array,
// evicting the oldest read items, never an unread one nor more unread items
// than the read-ahead limit — and returns how many the ring can take now
// (0: it must wait for the pacer).
func (r *Ring[T]) roomLocked(want int) int {
	read := r.searchLocked(r.mu.pacer) // items with offset < pacer
	unread := r.mu.n - read
	want = min(want, r.mu.ahead-unread)
	capacity := r.capLocked()
	switch {
	case r.mu.viewing:
		// The pacer holds slots of the array: it must not be copied.
	case want > len(r.mu.buf)-r.mu.n && len(r.mu.buf) < capacity:
		r.growLocked(r.mu.n + want)
	}
	// Past a lowered capacity free is negative: evicting read items brings
	// the ring back to capacity before it takes any.
	free := min(len(r.mu.buf), capacity) - r.mu.n
	k := min(want, free+read)
	if k <= 0 {
		return 0
	}
	if evict := k - free; evict > 0 {
		r.mu.low = r.offsetOf(&r.mu.buf[r.physLocked(evict-1)]) + 1
		r.mu.head = r.physLocked(evict)
		r.mu.n -= evict
		r.mu.stats.Evicted += uint64(evict)
	}
	if len(r.mu.buf) > capacity && !r.mu.viewing {
		// SetCapacity lowered it, and the items now fit (n + k <=
		// capacity): release the memory.
		r.resizeLocked(capacity)
	}
	return k
}

// tailLocked returns the k free slots after the last item (k <= free
// slots): a, then b when they wrap around the array's end.
func (r *Ring[T]) tailLocked(k int) (a, b []T) {
	tail := r.physLocked(r.mu.n)
	if end := tail + k; end <= len(r.mu.buf) {
		return r.mu.buf[tail:end:end], nil
	}
	return r.mu.buf[tail:], r.mu.buf[: tail+k-len(r.mu.buf) : tail+k-len(r.mu.buf)]
}

// publishLocked makes the k items written after the last one part of the
// ring and wakes the readers waiting for them.
func (r *Ring[T]) publishLocked(k int) {
	last := r.physLocked(r.mu.n + k - 1)
	r.mu.n += k
	r.mu.high = r.offsetOf(&r.mu.buf[last]) + 1
	r.mu.lastAppend = time.Now()
	r.mu.stats.Appended += uint64(k)
	if r.mu.changed != nil {
		close(r.mu.changed)
		r.mu.changed = nil
	}
}

// Reserve is Append in place: it waits as Append does until the ring can
// take more items, makes room for up to n of them (evicting as Append
// would) and returns that many empty slots after the last item — a, then b
// when they wrap around the array's end (b is then non-empty) — for the
// writer to fill with the next items, in order, without holding the ring's
// lock. Readers do not see them until Commit. Filling in place spares
// copying each item from the writer's batch into the ring (the chain's
// fetcher decodes every record straight into its slot). n < 1
// reserves nothing. Errors: ctx.Err() if ctx ends while waiting, ErrClosed
// if the ring is or gets closed. Only the writer may call it, and Commit
// before its next Reserve or Append.
func (r *Ring[T]) Reserve(ctx context.Context, n int) (a, b []T, err error) {
	if len(r.res[0]) > 0 {
		panic("buffer: Reserve before Commit of the previous reservation")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.mu.closed {
			return nil, nil, ErrClosed
		}
		if n < 1 {
			return nil, nil, nil
		}
		if k := r.roomLocked(n); k > 0 {
			a, b = r.tailLocked(k)
			r.res = [2][]T{a, b}
			return a, b, nil
		}
		if r.mu.room == nil {
			r.mu.room = make(chan struct{})
		}
		r.mu.stats.WriterWaits++
		if err := r.waitLocked(ctx, r.mu.room); err != nil {
			return nil, nil, err
		}
	}
}

// Commit appends the first k slots of the reservation — a's, then b's —
// and zeroes the rest. Their offsets must be strictly increasing and >=
// High(), else Commit appends none of them, zeroes them all and returns an
// error wrapping ErrOrder. It returns ErrClosed (appending nothing) if the
// ring was closed since Reserve. It panics if k is negative or more than
// was reserved.
func (r *Ring[T]) Commit(k int) error {
	a, b := r.res[0], r.res[1]
	r.res = [2][]T{}
	if k < 0 || k > len(a)+len(b) {
		panic(fmt.Sprintf("buffer: Commit of %d items, %d reserved", k, len(a)+len(b)))
	}
	// The reserved slots are the writer's: check them before locking.
	ka := min(k, len(a))
	err := r.checkOrder(a[:ka])
	if err == nil && k > ka {
		if err = r.checkOrder(b[:k-ka]); err == nil {
			if prev, cur := r.offsetOf(&a[ka-1]), r.offsetOf(&b[0]); cur <= prev {
				err = fmt.Errorf("%w: offset %d after %d", ErrOrder, cur, prev)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && k > 0 {
		if first := r.offsetOf(&a[0]); first < r.mu.high {
			err = fmt.Errorf("%w: offset %d below high %d", ErrOrder, first, r.mu.high)
		}
	}
	if err == nil && r.mu.closed {
		err = ErrClosed
	}
	if err != nil {
		clear(a)
		clear(b)
		return err
	}
	clear(a[ka:])
	clear(b[k-ka:])
	if k > 0 {
		r.publishLocked(k)
	}
	return nil
}

// Discard evicts the items with offset < below, which the caller knows no
// reader will read again (every reader's cursor is at or past below): their
// slots are zeroed at once, so whatever the items point to can be
// collected, instead of staying referenced until the writer needs the
// space. below is clamped to the pacer's cursor (no unread item goes) and
// to High; Low moves up to it. Discarded items count as Evicted.
func (r *Ring[T]) Discard(below int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	below = min(below, r.mu.pacer, r.mu.high)
	if below <= r.mu.low {
		return
	}
	k := r.searchLocked(below)
	if k > 0 {
		if end := r.mu.head + k; end <= len(r.mu.buf) {
			clear(r.mu.buf[r.mu.head:end])
		} else {
			clear(r.mu.buf[r.mu.head:])
			clear(r.mu.buf[:end-len(r.mu.buf)])
		}
		r.mu.head = r.physLocked(k)
		r.mu.n -= k
		r.mu.stats.Evicted += uint64(k)
	}
	r.mu.low = below
	if r.mu.room != nil {
		close(r.mu.room)
		r.mu.room = nil
	}
}

// growLocked doubles the backing array until it holds need items (at most
// capacity), keeping the items in order from index 0.
func (r *Ring[T]) growLocked(need int) {
	size := len(r.mu.buf)
	capacity := r.capLocked()
	for size < need && size < capacity {
		size *= 2
	}
	r.resizeLocked(min(size, capacity))
}

// resizeLocked moves the items into a new array of size slots (size >=
// n), in order from index 0. Only the writer's calls reach it (a
// reservation points into the array), and never while the pacer views it.
func (r *Ring[T]) resizeLocked(size int) {
	buf := make([]T, size)
	if end := r.mu.head + r.mu.n; end <= len(r.mu.buf) {
		copy(buf, r.mu.buf[r.mu.head:end])
	} else {
		m := copy(buf, r.mu.buf[r.mu.head:])
		copy(buf[m:], r.mu.buf[:end-len(r.mu.buf)])
	}
	r.mu.buf, r.mu.head = buf, 0
}

// Read appends to dst the items with offset >= from, in order: up to
// cap(dst)-len(dst) of them, and at least one. It blocks until at least one
// exists. It returns an *EvictedError (errors.Is ErrEvicted) if from < Low(),
// the close error once Close was called and every item >= from has been
// returned, and ctx.Err() if ctx ends while waiting. Items and a non-nil
// error never come together. With pacer=true it first records that the
// pacer has read every item with offset < from, before any waiting, so the
// writer can go on while the pacer waits. Reading into a dst with spare
// capacity does not allocate.
func (r *Ring[T]) Read(ctx context.Context, from int64, dst []T, pacer bool) ([]T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pacer {
		r.advancePacerLocked(from)
	}
	for {
		out, ok, err := r.readLocked(from, dst)
		if ok || err != nil {
			return out, err
		}
		r.mu.stats.ReaderWaits++
		if err := r.waitLocked(ctx, r.changedLocked()); err != nil {
			return dst, err
		}
	}
}

// TryRead is Read without blocking: when no item >= from is available yet
// (and the ring is not closed) it returns dst unchanged and a nil error.
func (r *Ring[T]) TryRead(from int64, dst []T, pacer bool) ([]T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pacer {
		r.advancePacerLocked(from)
	}
	out, _, err := r.readLocked(from, dst)
	return out, err
}

// readLocked copies items >= from into dst; ok reports whether it copied any.
func (r *Ring[T]) readLocked(from int64, dst []T) (out []T, ok bool, err error) {
	if from < r.mu.low {
		r.mu.stats.Evictions++
		return dst, false, &EvictedError{From: from, Low: r.mu.low}
	}
	i := r.searchLocked(from)
	if i == r.mu.n {
		if r.mu.closed {
			return dst, false, r.mu.closeErr
		}
		return dst, false, nil
	}
	cnt := min(r.mu.n-i, max(1, cap(dst)-len(dst)))
	p, c := r.physLocked(i), len(r.mu.buf)
	if p+cnt <= c {
		return append(dst, r.mu.buf[p:p+cnt]...), true, nil
	}
	dst = append(dst, r.mu.buf[p:]...)
	return append(dst, r.mu.buf[:p+cnt-c]...), true, nil
}

// View is the pacer's Read in place: it records that the pacer has read
// every item below from (as Read with pacer=true), waits as Read does, and
// returns the ring's own slots holding the items with offset >= from, in
// order — up to limit of them (at least one) and no further than the
// array's end — instead of copying them. They stay valid until the
// pacer's next Read, TryRead or View: no item at or above the pacer's
// cursor is evicted, discarded or overwritten, and the array is not
// grown (copied) while a view is held. The pacer may modify them
// only when no other reader reads the ring (a one-stage chain's only
// stage: a copy into the stage's batch would be most of its read
// cost), and must not zero them (Discard does, once they are passed).
// A pacer that always finds items to view therefore keeps the array at the
// size it has: it grows only while the pacer waits for items.
func (r *Ring[T]) View(ctx context.Context, from int64, limit int) ([]T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advancePacerLocked(from) // ends the previous view
	for {
		if from < r.mu.low {
			r.mu.stats.Evictions++
			return nil, &EvictedError{From: from, Low: r.mu.low}
		}
		i := r.searchLocked(from)
		if i < r.mu.n {
			p, c := r.physLocked(i), len(r.mu.buf)
			cnt := max(1, min(r.mu.n-i, limit, c-p))
			r.mu.viewing = true
			return r.mu.buf[p : p+cnt : p+cnt], nil
		}
		if r.mu.closed {
			return nil, r.mu.closeErr
		}
		r.mu.stats.ReaderWaits++
		if err := r.waitLocked(ctx, r.changedLocked()); err != nil {
			return nil, err
		}
	}
}

// advancePacerLocked records that the pacer has read everything below from
// and wakes the writer if it waits for that.
func (r *Ring[T]) advancePacerLocked(from int64) {
	if from <= r.mu.pacer && !r.mu.viewing {
		return
	}
	r.mu.pacer = max(r.mu.pacer, from)
	r.mu.viewing = false // the pacer's view, if any, is done: the array may grow
	if r.mu.room != nil {
		close(r.mu.room)
		r.mu.room = nil
	}
}

// searchLocked returns the logical index of the first item with offset >=
// from (n if none). Offsets have gaps, so it bisects instead of computing.
func (r *Ring[T]) searchLocked(from int64) int {
	n := r.mu.n
	if n == 0 || from >= r.mu.high {
		return n
	}
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.offsetOf(&r.mu.buf[r.physLocked(m)]) < from {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// physLocked maps logical index i (0 <= i <= capacity) to its slot in buf.
func (r *Ring[T]) physLocked(i int) int {
	p := r.mu.head + i
	if p >= len(r.mu.buf) {
		p -= len(r.mu.buf)
	}
	return p
}

// waitLocked releases the lock until ch is closed or ctx ends, then takes it
// again. Callers re-check their condition afterwards.
func (r *Ring[T]) waitLocked(ctx context.Context, ch <-chan struct{}) error {
	r.mu.Unlock()
	defer r.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Changed returns a channel that is closed at the next Append that adds
// items, or at Close (after Close it returns a closed channel). Callers that
// select on several things get it, re-check the ring, then wait on it; an
// Append between the two is not missed. A channel is allocated only when
// someone asks for one, and shared by everyone who asks before the next
// change.
func (r *Ring[T]) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changedLocked()
}

func (r *Ring[T]) changedLocked() chan struct{} {
	if r.mu.changed == nil {
		r.mu.changed = make(chan struct{})
		if r.mu.closed {
			close(r.mu.changed)
		}
	}
	return r.mu.changed
}

// Close marks the end of the writer's stream: readers get err (ErrClosed if
// nil; io.EOF for a normal end of claim) once they have read every item, a
// waiting Append returns ErrClosed. Only the first Close counts. The items
// stay readable.
func (r *Ring[T]) Close(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return
	}
	if err == nil {
		err = ErrClosed
	}
	r.mu.closed, r.mu.closeErr = true, err
	if r.mu.changed != nil {
		close(r.mu.changed) // wake waiting readers
		r.mu.changed = nil  // changedLocked hands out a closed one from now on
	}
	if r.mu.room != nil {
		close(r.mu.room)
		r.mu.room = nil
	}
}

// Room reports whether a reader at from can read from the ring (from >=
// Low(): a polling reader may switch back; offsets at or above High() are
// covered, Read waits for them), and if so how many items the writer can
// still append before it must evict the item at from: the free slots plus
// the items below from.
func (r *Ring[T]) Room(from int64) (covered bool, room int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from < r.mu.low {
		return false, 0
	}
	return true, r.capLocked() - r.mu.n + r.searchLocked(from)
}

// Low is the smallest offset still covered: start, then last-evicted+1.
func (r *Ring[T]) Low() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.low
}

// High is the last appended offset + 1 (start if none).
func (r *Ring[T]) High() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.high
}

// LastAppend is the time of the last Append that added items (zero if none).
func (r *Ring[T]) LastAppend() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lastAppend
}

// Len is the number of items held.
func (r *Ring[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.n
}

// Cap is the capacity: the one given to New, or to SetCapacity since.
func (r *Ring[T]) Cap() int { return int(r.capacity.Load()) }

// Stats returns the ring's counters.
func (r *Ring[T]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.stats
}
