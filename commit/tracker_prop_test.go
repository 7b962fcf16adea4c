package commit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// trackerModel is a reference Tracker: a plain sorted list, no ring, no
// search, no counters. It keeps every begun record at or above its position,
// plus the meta of the last record below it.
type trackerModel struct {
	window    int
	last      int64 // last begun offset (start-1 if none)
	recs      []modelRec
	prefixMet int64   // meta of the last record below the position
	span      int64   // 0: none
	pre       []int64 // restored completed-above offsets not yet begun
}

type modelRec struct {
	offset, meta int64
	key          uint64
	done         bool
	abandoned    bool
	pinned       bool
}

type trackerOp struct {
	begin   bool
	both    bool // with begin: BeginCompleted
	abandon bool // not begin: Abandon instead of Complete
	offset  int64
	meta    int64
	key     uint64
}

func (op trackerOp) String() string {
	if op.abandon {
		return fmt.Sprintf("Abandon(%d)", op.offset)
	}
	if op.both {
		return fmt.Sprintf("BeginCompleted(%d, %d)", op.offset, op.meta)
	}
	if op.begin {
		return fmt.Sprintf("Begin(%d, %d)", op.offset, op.meta)
	}
	return fmt.Sprintf("Complete(%d)", op.offset)
}

// position: the first begun record not done, else last+1.
func (m *trackerModel) position() (int64, int64) {
	for _, r := range m.recs {
		if !r.done {
			return r.offset, m.prefixMet
		}
	}
	return m.last + 1, m.prefixMet
}

// apply performs op on the model and returns the expected error sentinel.
func (m *trackerModel) apply(op trackerOp) error {
	if op.both {
		if err := m.apply(trackerOp{begin: true, offset: op.offset, meta: op.meta, key: op.key}); err != nil {
			return err
		}
		return m.apply(trackerOp{offset: op.offset})
	}
	next, _ := m.position()
	if op.begin {
		switch {
		case op.offset <= m.last || op.offset == math.MaxInt64:
			return ErrOutOfOrder
		case len(m.recs) == m.window:
			return ErrWindowFull
		case m.span > 0 && len(m.recs) > 0 && op.offset-m.recs[0].offset > m.span:
			return ErrWindowFull
		}
		m.recs = append(m.recs, modelRec{offset: op.offset, meta: op.meta, key: op.key, pinned: slices.Contains(m.pre, op.offset)})
		m.last = op.offset
		for len(m.pre) > 0 && m.pre[0] <= op.offset {
			m.pre = m.pre[1:]
		}
		return nil
	}
	for i := range m.recs {
		if m.recs[i].offset != op.offset {
			continue
		}
		if m.recs[i].done || m.recs[i].abandoned {
			return ErrDuplicate
		}
		if op.abandon {
			m.recs[i].abandoned = true
			return nil
		}
		m.recs[i].done = true
		for len(m.recs) > 0 && m.recs[0].done {
			m.prefixMet = m.recs[0].meta
			m.recs = m.recs[1:]
		}
		return nil
	}
	if op.offset < next {
		return ErrDuplicate
	}
	return ErrUnknownOffset
}

func (m *trackerModel) inFlight() int {
	n := 0
	for _, r := range m.recs {
		if !r.done && !r.abandoned {
			n++
		}
	}
	return n
}

// completedAbove: every done record with no earlier record of its key not
// done, then the restored offsets not begun.
func (m *trackerModel) completedAbove() []int64 {
	var out []int64
	for i, r := range m.recs {
		if !r.done {
			continue
		}
		closed := true
		for _, e := range m.recs[:i] {
			if e.key == r.key && !e.done {
				closed = false
			}
		}
		if closed || r.pinned {
			out = append(out, r.offset)
		}
	}
	return append(out, m.pre...)
}

// trackerChecker drives a Tracker and its model with the same operations and
// checks, after every operation, I3 (the position never passes an
// incomplete begun offset and never decreases) and that Tracker and model
// agree on position, meta, errors, advanced and counts.
type trackerChecker struct {
	tr       *Tracker
	m        trackerModel
	prevNext int64
	ops      []trackerOp // history, for failure messages
}

func newTrackerChecker(start int64, window int, initialMeta int64) *trackerChecker {
	tr := NewTracker(start, window)
	tr.SetInitialMeta(initialMeta)
	return &trackerChecker{
		tr:       tr,
		m:        trackerModel{window: window, last: start - 1, prefixMet: initialMeta},
		prevNext: start,
	}
}

func (c *trackerChecker) do(op trackerOp) error {
	c.ops = append(c.ops, op)
	wantPre := slices.Contains(c.m.pre, op.offset)
	if c.tr.PreCompleted(op.offset) != wantPre {
		return c.fail("%v: PreCompleted %v, want %v", op, !wantPre, wantPre)
	}
	want := c.m.apply(op)
	var got error
	advanced := false
	switch {
	case op.both:
		advanced, got = c.tr.BeginCompletedKey(op.offset, op.meta, op.key)
	case op.begin:
		got = c.tr.BeginKey(op.offset, op.meta, op.key)
	case op.abandon:
		got = c.tr.Abandon(op.offset)
	default:
		advanced, got = c.tr.Complete(op.offset)
	}
	if !errors.Is(got, want) || (want == nil) != (got == nil) {
		return c.fail("%v: error %v, want %v", op, got, want)
	}
	next, meta := c.tr.Position()
	wantNext, wantMeta := c.m.position()
	// I3: every begun offset below next is complete; next never decreases.
	for _, r := range c.m.recs {
		if !r.done && next > r.offset {
			return c.fail("%v: position %d passed incomplete offset %d", op, next, r.offset)
		}
	}
	if next < c.prevNext {
		return c.fail("%v: position went back from %d to %d", op, c.prevNext, next)
	}
	if next != wantNext || meta != wantMeta {
		return c.fail("%v: position (%d, %d), model (%d, %d)", op, next, meta, wantNext, wantMeta)
	}
	if got, want := c.tr.AppendCompletedAbove(nil), c.m.completedAbove(); !slices.Equal(got, want) {
		return c.fail("%v: completed above %v, model %v", op, got, want)
	}
	if (!op.begin || op.both) && !op.abandon && advanced != (next != c.prevNext) {
		return c.fail("%v: advanced=%v but position %d -> %d", op, advanced, c.prevNext, next)
	}
	if c.tr.InFlight() != c.m.inFlight() || c.tr.Occupied() != len(c.m.recs) {
		return c.fail("%v: in flight %d occupied %d, model %d %d",
			op, c.tr.InFlight(), c.tr.Occupied(), c.m.inFlight(), len(c.m.recs))
	}
	c.prevNext = next
	return nil
}

func (c *trackerChecker) fail(format string, args ...any) error {
	h := c.ops
	if len(h) > 20 {
		h = h[len(h)-20:]
	}
	return fmt.Errorf("after %d ops (last: %v): %s", len(c.ops), h, fmt.Sprintf(format, args...))
}

// randomOp: mostly valid Begins over random gaps and Completes of random
// in-flight records; sometimes misuse (out of order, duplicate, unknown).
func randomOp(r *rand.Rand, c *trackerChecker) trackerOp {
	m := &c.m
	if r.IntN(2) == 0 || (len(m.recs) == 0 && r.IntN(4) != 0) {
		off := m.last + 1
		switch p := r.IntN(100); {
		case p < 60: // dense
		case p < 90:
			off += int64(r.IntN(5))
		case p < 97:
			off += int64(r.IntN(10000))
		default:
			off -= int64(r.IntN(3)) // out of order
		}
		return trackerOp{begin: true, both: r.IntN(3) == 0, offset: off, meta: r.Int64N(1 << 40), key: uint64(r.IntN(4))}
	}
	if r.IntN(20) == 0 && len(m.recs) > 0 {
		return trackerOp{abandon: true, offset: m.recs[r.IntN(len(m.recs))].offset}
	}
	switch p := r.IntN(100); {
	case len(m.recs) == 0:
		next, _ := m.position()
		return trackerOp{offset: next - 2 + int64(r.IntN(4))}
	case p < 85: // a random begun record (done or not)
		return trackerOp{offset: m.recs[r.IntN(len(m.recs))].offset}
	case p < 95: // the head, in order
		return trackerOp{offset: m.recs[0].offset}
	default: // anything nearby: gaps, released, beyond
		next, _ := m.position()
		return trackerOp{offset: next - 3 + int64(r.IntN(int(m.last-next)+6))}
	}
}

func TestTrackerProperty(t *testing.T) {
	seeds, ops := 400, 3000
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 0xd1f))
		window := 1 + r.IntN(64)
		start := r.Int64N(1000)
		c := newTrackerChecker(start, window, r.Int64N(100))
		if r.IntN(2) == 0 {
			span := 1 + r.IntN(2*window)
			c.tr.SetSpan(span)
			c.m.span = int64(span)
		}
		if r.IntN(2) == 0 {
			var pre []int64
			for o := start + int64(r.IntN(3)); o < start+200; o += 1 + int64(r.IntN(6)) {
				pre = append(pre, o)
			}
			c.tr.SetCompletedAbove(pre)
			c.m.pre = pre
		}
		for range ops {
			if err := c.do(randomOp(r, c)); err != nil {
				t.Fatalf("seed %d window %d: %v", seed, window, err)
			}
		}
	}
}

// FuzzTracker: the same checks, operations read from the fuzz input, two
// bytes each.
func FuzzTracker(f *testing.F) {
	f.Add(uint8(4), uint16(0), []byte{0, 0, 0, 1, 1, 1, 1, 0})
	f.Add(uint8(2), uint16(7), []byte{0, 3, 0, 0, 0, 200, 1, 2, 1, 1, 1, 0, 1, 0, 0, 1})
	f.Add(uint8(16), uint16(100), []byte{0, 9, 0, 9, 0, 9, 1, 4, 1, 2, 1, 250, 0, 255, 1, 0, 1, 0})
	f.Fuzz(func(t *testing.T, window uint8, start uint16, data []byte) {
		c := newTrackerChecker(int64(start), 1+int(window%32), int64(start)*7)
		for len(data) >= 2 {
			if err := c.do(bytesOp(data[0], data[1], c)); err != nil {
				t.Fatal(err)
			}
			data = data[2:]
		}
	})
}

// bytesOp: kind's low bit picks Begin or Complete. A Begin's arg is the gap
// (values >= 250 go backwards: out of order). A Complete's arg indexes the
// model's records; past the end it names an offset around the position.
func bytesOp(kind, arg byte, c *trackerChecker) trackerOp {
	m := &c.m
	if kind&1 == 0 {
		off := m.last + 1 + int64(arg)
		if arg >= 250 {
			off = m.last - int64(arg-250)
		}
		return trackerOp{begin: true, both: kind&2 != 0, offset: off, meta: int64(kind)<<8 | int64(arg), key: uint64(kind>>2) & 3}
	}
	if int(arg) < len(m.recs) {
		return trackerOp{offset: m.recs[arg].offset, abandon: kind&0xf0 == 0xf0}
	}
	next, _ := m.position()
	return trackerOp{offset: next - 4 + int64(arg)%int64(m.last-next+9)}
}

func permutation(n int, seed uint64) []int {
	return rand.New(rand.NewPCG(seed, 0)).Perm(n)
}
