package commit

import (
	"fmt"
	"math"
)

// Tracker is the contiguous-completion tracker for one stage of one
// partition: records are begun in offset order, completed in any order, and
// Position reports how far the completed prefix reaches. See the package doc
// for the invariant.
//
// A Tracker is not safe for concurrent use; the caller serialises (the chain
// holds a mutex around it).
type Tracker struct {
	// slots is a ring; the occupied slots are slots[head], slots[head+1], …
	// (n of them, wrapping), with strictly increasing offsets. slots[head] is
	// never done while n > 0: completed head slots are released at once.
	// It grows by doubling (full) up to window, never beyond.
	slots  []slot
	window int
	head   int
	n      int   // occupied slots: begun and not yet below the position
	done   int   // occupied slots already completed (out of order)
	last   int64 // last begun offset; start-1 before the first Begin
	meta   int64 // meta of the last record of the completed prefix
	// released is set once a record joined the completed prefix; from then
	// on meta no longer reports the initial meta.
	released  bool
	abandoned int // occupied slots abandoned (never complete)
	// span bounds begins: no offset above the position + span (0: none).
	span int64
	// pre holds offsets completed above the start by an earlier run (see
	// SetCompletedAbove) that have not been begun yet, increasing.
	pre []int64
	// blocked is AppendCompletedAbove's scratch: keys with an incomplete
	// record.
	blocked map[uint64]struct{}
}

type slot struct {
	offset    int64
	meta      int64
	key       uint64
	done      bool
	abandoned bool
	// pinned: restored as completed (SetCompletedAbove); always carried.
	pinned bool
}

// NewTracker returns a tracker whose position is start (the stage's resume
// position: the first offset not completed) and that allows at most window
// records begun and not yet covered by the position. It panics if start < 0
// or window <= 0: both are configuration errors.
func NewTracker(start int64, window int) *Tracker {
	if start < 0 {
		panic(fmt.Sprintf("commit: NewTracker: negative start %d", start))
	}
	if window <= 0 {
		panic(fmt.Sprintf("commit: NewTracker: window %d must be > 0", window))
	}
	return &Tracker{slots: make([]slot, min(window, firstSlots)), window: window, last: start - 1}
}

// firstSlots is how many slots a tracker starts with; they double as the
// records in flight need them, up to the window. An instance may run
// thousands of stages (a thousand partitions of a few stages each), most
// of them with few records in flight, and a full window is 1,024 slots of
// 40 bytes each.
const firstSlots = 32

// full reports whether the window is full, growing the slots first when
// they are full and the window is not.
func (t *Tracker) full() bool {
	if t.n < len(t.slots) {
		return false
	}
	if len(t.slots) == t.window {
		return true
	}
	slots := make([]slot, min(2*len(t.slots), t.window))
	m := copy(slots, t.slots[t.head:])
	copy(slots[m:], t.slots[:t.head])
	t.slots, t.head = slots, 0
	return false
}

// Begin registers the next dispatched record at offset, carrying meta.
// Offsets must be strictly increasing across Begin calls and at least the
// start; an offset that is skipped is a gap and is never expected to
// complete. If nothing is in flight, Begin moves the position up to offset
// (the offsets skipped are gaps), without changing the reported meta.
//
// It returns ErrWindowFull (unwrapped) when Occupied() == Window(): the caller
// waits until a Complete returns advanced=true and retries. It returns a
// *TrackerError wrapping ErrOutOfOrder when offset <= the last begun offset,
// offset < start, or offset == math.MaxInt64. On error nothing changes.
func (t *Tracker) Begin(offset int64, meta int64) error {
	return t.BeginKey(offset, meta, 0)
}

// BeginKey is Begin of a record of key (a hash of the record's key): see
// AppendCompletedAbove. Begin is BeginKey with key 0. It also returns
// ErrWindowFull when a span is set and offset > BeginLimit().
func (t *Tracker) BeginKey(offset int64, meta int64, key uint64) error {
	if offset <= t.last || offset == math.MaxInt64 {
		return t.misuse("begin", offset, ErrOutOfOrder)
	}
	if t.full() || t.beyondSpan(offset) {
		return ErrWindowFull
	}
	t.slots[t.ring(t.n)] = slot{offset: offset, meta: meta, key: key, pinned: t.isPre(offset)}
	t.n++
	t.last = offset
	t.dropPre(offset)
	return nil
}

// beyondSpan reports whether beginning offset would put it more than the
// span above the position (with nothing occupied, offset becomes the
// position).
func (t *Tracker) beyondSpan(offset int64) bool {
	return t.span > 0 && t.n > 0 && offset-t.slots[t.head].offset > t.span
}

// isPre reports whether offset is a restored offset.
func (t *Tracker) isPre(offset int64) bool {
	return len(t.pre) > 0 && t.PreCompleted(offset)
}

// dropPre forgets the restored offsets up to offset: begun (or gaps).
func (t *Tracker) dropPre(offset int64) {
	i := 0
	for i < len(t.pre) && t.pre[i] <= offset {
		i++
	}
	if i > 0 {
		t.pre = t.pre[i:]
	}
}

// SetSpan limits begins to offsets at most span above the position (see
// BeginLimit), so that the offsets completed above the position always fit
// in the commit metadata (MaxAboveSpan). span <= 0 removes the limit.
func (t *Tracker) SetSpan(span int) {
	t.span = max(int64(span), 0)
}

// BeginLimit returns the largest offset Begin accepts now under the span
// (math.MaxInt64 when no span is set or nothing is occupied: the offset
// then becomes the position).
func (t *Tracker) BeginLimit() int64 {
	if t.span == 0 || t.n == 0 {
		return math.MaxInt64
	}
	return t.slots[t.head].offset + t.span
}

// SetCompletedAbove restores the offsets an earlier run completed above
// this tracker's start (Checkpoint.Above of the restored position): they
// are reported by AppendCompletedAbove until they are begun, and
// PreCompleted reports them so that the caller begins them with
// BeginCompleted instead of processing them again. Call it before the first
// Begin. It panics if above is not strictly increasing from the start.
func (t *Tracker) SetCompletedAbove(above []int64) {
	prev := t.last
	for _, o := range above {
		if o <= prev {
			panic(fmt.Sprintf("commit: SetCompletedAbove: %d not increasing from start %d", o, t.last+1))
		}
		prev = o
	}
	t.pre = append([]int64(nil), above...)
}

// PreCompleted reports whether offset was completed by an earlier run (see
// SetCompletedAbove) and not begun since.
func (t *Tracker) PreCompleted(offset int64) bool {
	for _, o := range t.pre {
		if o >= offset {
			return o == offset
		}
	}
	return false
}

// Abandon gives up a begun, incomplete record that will never complete (a
// stop drops it before it ran): it keeps its slot, so the position never
// passes it, but it no longer counts as in flight. Errors as Complete.
func (t *Tracker) Abandon(offset int64) error {
	k, ok := t.find(offset)
	if !ok {
		next, _ := t.Position()
		if offset < next {
			return t.misuse("abandon", offset, ErrDuplicate)
		}
		return t.misuse("abandon", offset, ErrUnknownOffset)
	}
	i := t.ring(k)
	if t.slots[i].done || t.slots[i].abandoned {
		return t.misuse("abandon", offset, ErrDuplicate)
	}
	t.slots[i].abandoned = true
	t.abandoned++
	return nil
}

// AppendCompletedAbove appends to dst, increasing, the offsets completed
// above the position that may be carried in a checkpoint (a restored one
// not begun yet may equal the position: see Checkpoint.Above): a completed
// record is carried only when every record of its key begun before it has
// completed too (the set is closed under reads-from: a record may have read
// the state its key's earlier records wrote, and carrying it without them
// would persist their effect with it while they run again after a restart).
// The restored offsets (SetCompletedAbove) are included, begun or not: they
// were closed when carried, and their effects are persisted.
// Records begun with key 0 share one key.
func (t *Tracker) AppendCompletedAbove(dst []int64) []int64 {
	if t.done > 0 {
		if t.blocked == nil {
			t.blocked = make(map[uint64]struct{})
		}
		for k := 0; k < t.n; k++ {
			sl := &t.slots[t.ring(k)]
			if !sl.done {
				t.blocked[sl.key] = struct{}{}
				continue
			}
			if _, b := t.blocked[sl.key]; !b || sl.pinned {
				dst = append(dst, sl.offset)
			}
		}
		clear(t.blocked)
	}
	return append(dst, t.pre...)
}

// Complete marks a begun offset done; offsets may complete in any order.
// advanced reports whether the position moved (and so whether slots were
// freed for Begin). It returns a *TrackerError wrapping ErrDuplicate when the
// offset is already completed or below the position, or ErrUnknownOffset when
// it is at or above the position but was never begun. On error nothing
// changes.
func (t *Tracker) Complete(offset int64) (advanced bool, err error) {
	k, ok := t.find(offset)
	if !ok {
		next, _ := t.Position()
		if offset < next {
			return false, t.misuse("complete", offset, ErrDuplicate)
		}
		return false, t.misuse("complete", offset, ErrUnknownOffset)
	}
	i := t.ring(k)
	if t.slots[i].done || t.slots[i].abandoned {
		return false, t.misuse("complete", offset, ErrDuplicate)
	}
	t.slots[i].done = true
	t.done++
	if k != 0 {
		return false, nil
	}
	t.release()
	return true, nil
}

// BeginCompleted begins and completes offset in one call: the same as
// Begin(offset, meta) followed by Complete(offset), with the same errors
// (ErrWindowFull, a *TrackerError wrapping ErrOutOfOrder) and nothing
// changed on error. It is for a caller that runs a record to completion
// before beginning the next one (the chain's synchronous stages: one
// critical section per record instead of two). advanced reports whether
// the position moved: it does exactly when nothing begun before offset is
// still incomplete.
func (t *Tracker) BeginCompleted(offset int64, meta int64) (advanced bool, err error) {
	return t.beginCompletedKey(offset, meta, 0)
}

// beginCompletedKey is BeginCompleted of a record of key (see BeginKey).
// BeginCompleted is it with key 0: the chain begins records completed only
// on a stage without a key table (stageRun.direct), so no caller needs a
// key; the tracker's tests use it to mix both kinds of begin.
func (t *Tracker) beginCompletedKey(offset int64, meta int64, key uint64) (advanced bool, err error) {
	if offset <= t.last || offset == math.MaxInt64 {
		return false, t.misuse("begin", offset, ErrOutOfOrder)
	}
	if t.full() || t.beyondSpan(offset) {
		return false, ErrWindowFull
	}
	t.last = offset
	pinned := t.isPre(offset)
	t.dropPre(offset)
	if t.n == 0 {
		// It would be the head, completed at once: released immediately.
		t.meta = meta
		t.released = true
		return true, nil
	}
	// Behind an incomplete head: held, done, until the head completes.
	t.slots[t.ring(t.n)] = slot{offset: offset, meta: meta, key: key, done: true, pinned: pinned}
	t.n++
	t.done++
	return false, nil
}

// release frees the completed slots at the head of the ring.
func (t *Tracker) release() {
	for t.n > 0 && t.slots[t.head].done {
		t.meta = t.slots[t.head].meta
		t.released = true
		t.head++
		if t.head == len(t.slots) {
			t.head = 0
		}
		t.n--
		t.done--
	}
}

// Position returns next, the smallest begun offset not completed — or, when
// everything begun is complete, the last begun offset + 1 (start if nothing
// was begun) — and meta, the meta of the last record of the completed prefix
// (the initial meta, see SetInitialMeta, while no record has completed into
// the prefix). next never decreases.
func (t *Tracker) Position() (next int64, meta int64) {
	if t.n > 0 {
		return t.slots[t.head].offset, t.meta
	}
	return t.last + 1, t.meta
}

// SetInitialMeta sets the meta that Position reports until the first record
// joins the completed prefix (a restored watermark). Once a record has, it has
// no effect. The default is 0.
func (t *Tracker) SetInitialMeta(meta int64) {
	if !t.released {
		t.meta = meta
	}
}

// InFlight returns the number of records begun and not completed.
// Abandoned records (Abandon) are not in flight.
func (t *Tracker) InFlight() int { return t.n - t.done - t.abandoned }

// CompletedAbove returns the number of records completed out of order
// above the position (behind an incomplete one). When it is 0 the
// completed set is exactly the prefix below the position: what exactly-once
// mode requires of a transaction it commits.
func (t *Tracker) CompletedAbove() int { return t.done }

// Occupied returns the number of records begun and not yet covered by the
// position: InFlight plus records completed out of order behind an
// incomplete one. Begin returns ErrWindowFull exactly when
// Occupied() == Window().
func (t *Tracker) Occupied() int { return t.n }

// Window returns the window given to NewTracker.
func (t *Tracker) Window() int { return t.window }

// ring maps the k-th occupied slot (0 = head) to its index in slots.
func (t *Tracker) ring(k int) int {
	i := t.head + k
	if i >= len(t.slots) {
		i -= len(t.slots)
	}
	return i
}

// find returns k such that the k-th occupied slot holds offset. Offsets in
// the ring are strictly increasing: a dense run is found by subtraction,
// otherwise by binary search.
func (t *Tracker) find(offset int64) (k int, ok bool) {
	if t.n == 0 {
		return 0, false
	}
	first := t.slots[t.head].offset
	if offset < first || offset > t.last {
		return 0, false
	}
	if d := offset - first; d < int64(t.n) && t.slots[t.ring(int(d))].offset == offset {
		return int(d), true
	}
	lo, hi := 0, t.n // invariant: slot lo-1 < offset, slot hi >= offset
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.slots[t.ring(mid)].offset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < t.n && t.slots[t.ring(lo)].offset == offset
}

func (t *Tracker) misuse(op string, offset int64, sentinel error) error {
	next, _ := t.Position()
	return &TrackerError{Op: op, Offset: offset, Next: next, LastBegun: t.last, Err: sentinel}
}
