package commit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pos is Position as one comparable value, for assertions.
type pos struct{ next, meta int64 }

func position(tr *Tracker) pos {
	n, m := tr.Position()
	return pos{n, m}
}

func complete(t *testing.T, tr *Tracker, offset int64) bool {
	t.Helper()
	advanced, err := tr.Complete(offset)
	require.NoError(t, err, "complete %d", offset)
	return advanced
}

func TestTrackerInOrder(t *testing.T) {
	tr := NewTracker(100, 2)
	assert.Equal(t, pos{100, 0}, position(tr))
	for o := int64(100); o < 110; o++ {
		require.NoError(t, tr.Begin(o, o*10))
		assert.Equal(t, pos{o, (o - 1) * 10 * b2i(o > 100)}, position(tr), "after begin %d", o)
		assert.Equal(t, 1, tr.InFlight())
		assert.True(t, complete(t, tr, o))
		assert.Equal(t, pos{o + 1, o * 10}, position(tr), "after complete %d", o)
		assert.Equal(t, 0, tr.InFlight())
		assert.Equal(t, 0, tr.Occupied())
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestTrackerOutOfOrder(t *testing.T) {
	tr := NewTracker(0, 8)
	for o := range int64(5) {
		require.NoError(t, tr.Begin(o, 100+o))
	}
	steps := []struct {
		complete int64
		advanced bool
		want     pos
		inFlight int
		occupied int
		above    int
	}{
		{3, false, pos{0, 0}, 4, 5, 1},
		{1, false, pos{0, 0}, 3, 5, 2},
		{0, true, pos{2, 101}, 2, 3, 1},
		{4, false, pos{2, 101}, 1, 3, 2},
		{2, true, pos{5, 104}, 0, 0, 0},
	}
	for _, s := range steps {
		assert.Equal(t, s.advanced, complete(t, tr, s.complete), "complete %d", s.complete)
		assert.Equal(t, s.want, position(tr), "after complete %d", s.complete)
		assert.Equal(t, s.inFlight, tr.InFlight(), "in flight after complete %d", s.complete)
		assert.Equal(t, s.occupied, tr.Occupied(), "occupied after complete %d", s.complete)
		assert.Equal(t, s.above, tr.CompletedAbove(), "completed above the position after complete %d", s.complete)
	}
}

// Offsets with gaps (compaction, transaction markers): a gap is never begun
// and never holds the position back.
func TestTrackerGaps(t *testing.T) {
	tr := NewTracker(10, 4)
	assert.Equal(t, int64(10), next(tr))
	require.NoError(t, tr.Begin(15, 1)) // 10..14 are gaps
	assert.Equal(t, int64(15), next(tr))
	require.NoError(t, tr.Begin(17, 2))
	require.NoError(t, tr.Begin(20, 3))
	assert.False(t, complete(t, tr, 17))
	assert.Equal(t, int64(15), next(tr))
	assert.True(t, complete(t, tr, 15))
	assert.Equal(t, pos{20, 2}, position(tr))
	assert.True(t, complete(t, tr, 20))
	assert.Equal(t, pos{21, 3}, position(tr))
	require.NoError(t, tr.Begin(30, 4))
	assert.Equal(t, pos{30, 3}, position(tr), "begin over a gap moves next, not meta")
}

func next(tr *Tracker) int64 {
	n, _ := tr.Position()
	return n
}

// Binary search over sparse offsets in a wrapped ring.
func TestTrackerSparseWrapped(t *testing.T) {
	tr := NewTracker(0, 5)
	offsets := []int64{0, 3, 4, 9, 100, 101, 1000, 1003, 5000, 5001, 5002, 9999}
	begun := 0
	for len(offsets) > 0 {
		for begun < len(offsets) && tr.Begin(offsets[begun], offsets[begun]) == nil {
			begun++
		}
		// Complete the begun ones newest first: only the last Complete
		// (the head) advances.
		for i := begun - 1; i >= 0; i-- {
			assert.Equal(t, i == 0, complete(t, tr, offsets[i]), "complete %d", offsets[i])
		}
		assert.Equal(t, pos{offsets[begun-1] + 1, offsets[begun-1]}, position(tr))
		offsets, begun = offsets[begun:], 0
	}
}

func TestTrackerWindowFull(t *testing.T) {
	tr := NewTracker(0, 3)
	assert.Equal(t, 3, tr.Window())
	for o := range int64(3) {
		require.NoError(t, tr.Begin(o, 0))
	}
	assert.Same(t, ErrWindowFull, tr.Begin(3, 0), "full: exactly the sentinel")

	// Completions behind an incomplete head free no slot.
	assert.False(t, complete(t, tr, 2))
	assert.False(t, complete(t, tr, 1))
	assert.Equal(t, 1, tr.InFlight())
	assert.Equal(t, 3, tr.Occupied())
	assert.ErrorIs(t, tr.Begin(3, 0), ErrWindowFull)
	assert.Equal(t, int64(0), next(tr))

	assert.True(t, complete(t, tr, 0))
	assert.Equal(t, 0, tr.Occupied())
	require.NoError(t, tr.Begin(3, 0), "the failed Begin left no trace")
	assert.Equal(t, int64(3), next(tr))
}

func TestTrackerBeginOutOfOrder(t *testing.T) {
	tr := NewTracker(10, 4)
	for _, o := range []int64{9, 0} {
		assertTrackerError(t, tr.Begin(o, 0), ErrOutOfOrder, "begin", o)
	}
	require.NoError(t, tr.Begin(10, 0))
	require.NoError(t, tr.Begin(12, 0))
	for _, o := range []int64{12, 11, 10, math.MaxInt64} {
		assertTrackerError(t, tr.Begin(o, 0), ErrOutOfOrder, "begin", o)
	}
	assert.Equal(t, 2, tr.InFlight(), "failed Begins change nothing")
	require.NoError(t, tr.Begin(13, 0))
}

func TestTrackerDuplicate(t *testing.T) {
	tr := NewTracker(0, 4)
	for o := range int64(3) {
		require.NoError(t, tr.Begin(o, 0))
	}
	assert.False(t, complete(t, tr, 2))
	_, err := tr.Complete(2) // still in the ring, marked done
	assertTrackerError(t, err, ErrDuplicate, "complete", 2)
	assert.True(t, complete(t, tr, 0))
	_, err = tr.Complete(0) // released: below the position
	assertTrackerError(t, err, ErrDuplicate, "complete", 0)
	assert.Equal(t, 1, tr.InFlight(), "failed Completes change nothing")
	assert.Equal(t, int64(1), next(tr))
}

func TestTrackerUnknownOffset(t *testing.T) {
	tr := NewTracker(5, 4)
	_, err := tr.Complete(5) // nothing begun
	assertTrackerError(t, err, ErrUnknownOffset, "complete", 5)
	require.NoError(t, tr.Begin(6, 0))
	require.NoError(t, tr.Begin(9, 0))
	for _, o := range []int64{7, 8, 10, math.MaxInt64} { // gaps, beyond the last begun
		_, err := tr.Complete(o)
		assertTrackerError(t, err, ErrUnknownOffset, "complete", o)
	}
	assert.Equal(t, 2, tr.InFlight())
}

func assertTrackerError(t *testing.T, err, sentinel error, op string, offset int64) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var te *TrackerError
	require.True(t, errors.As(err, &te), "%T is a *TrackerError", err)
	assert.Equal(t, op, te.Op)
	assert.Equal(t, offset, te.Offset)
	assert.Contains(t, err.Error(), " offset "+strconv.FormatInt(offset, 10)+" ")
}

func TestTrackerMeta(t *testing.T) {
	tr := NewTracker(0, 4)
	tr.SetInitialMeta(7)
	assert.Equal(t, pos{0, 7}, position(tr))
	require.NoError(t, tr.Begin(0, 10))
	require.NoError(t, tr.Begin(1, 20))
	require.NoError(t, tr.Begin(2, 30))
	assert.False(t, complete(t, tr, 1))
	assert.Equal(t, pos{0, 7}, position(tr), "1 is not in the completed prefix")
	assert.True(t, complete(t, tr, 0))
	assert.Equal(t, pos{2, 20}, position(tr), "meta of the last record of the prefix")
	tr.SetInitialMeta(99)
	assert.Equal(t, pos{2, 20}, position(tr), "initial meta ignored once a record completed")
	assert.True(t, complete(t, tr, 2))
	assert.Equal(t, pos{3, 30}, position(tr))
}

func TestNewTrackerPanics(t *testing.T) {
	assert.Panics(t, func() { NewTracker(0, 0) })
	assert.Panics(t, func() { NewTracker(-1, 1) })
	assert.NotPanics(t, func() { NewTracker(0, 1) })
}

func TestTrackerAllocs(t *testing.T) {
	tr := NewTracker(0, 2)
	var o int64
	var errs []error
	allocs := testing.AllocsPerRun(1000, func() {
		errs = errs[:0]
		errs = append(errs, tr.Begin(o, o), tr.Begin(o+2, o)) // sparse: binary search
		_, err := tr.Complete(o + 2)
		errs = append(errs, err, tr.Begin(o+3, o)) // window full
		_, err = tr.Complete(o)
		errs = append(errs, err)
		o += 4
	})
	assert.Zero(t, allocs)
	assert.Equal(t, []error{nil, nil, nil, ErrWindowFull, nil}, errs)
}

func BenchmarkTrackerInOrder(b *testing.B) {
	tr := NewTracker(0, 1024)
	b.ReportAllocs()
	var o int64
	for b.Loop() {
		if err := tr.Begin(o, o); err != nil {
			b.Fatal(err)
		}
		if _, err := tr.Complete(o); err != nil {
			b.Fatal(err)
		}
		o++
	}
}

// BenchmarkTrackerOutOfOrder: per record, with window records in flight,
// sparse offsets (every other offset is a gap, so lookups binary-search) and
// completions in a fixed random order. One op = one Begin + one Complete.
func BenchmarkTrackerOutOfOrder(b *testing.B) {
	const window = 256
	perm := permutation(window, 42)
	tr := NewTracker(0, window)
	b.ReportAllocs()
	var base int64
	i := 0
	for b.Loop() {
		if err := tr.Begin(base+2*int64(i), 0); err != nil {
			b.Fatal(err)
		}
		i++
		if i == window {
			for _, k := range perm {
				if _, err := tr.Complete(base + 2*int64(k)); err != nil {
					b.Fatal(err)
				}
			}
			base += 2 * window
			i = 0
		}
	}
}

// TestTrackerSlotsGrowToTheWindow: a tracker starts with few slots and
// grows them as records stay in flight, keeping their order when the ring
// has wrapped: the window still admits exactly window records, and the
// position after completing them is what it would be with every slot there
// from the start.
func TestTrackerSlotsGrowToTheWindow(t *testing.T) {
	tr := NewTracker(0, 1000)
	require.Less(t, len(tr.slots), 1000, "starts small")
	// Wrap the ring: begin and complete a few, so head moves.
	for o := range int64(20) {
		require.NoError(t, tr.Begin(o, o))
		_, err := tr.Complete(o)
		require.NoError(t, err)
	}
	for o := int64(20); o < 1020; o++ {
		require.NoError(t, tr.Begin(o, o), "offset %d", o)
	}
	require.ErrorIs(t, tr.Begin(1020, 0), ErrWindowFull)
	require.Equal(t, 1000, tr.Window())
	require.Len(t, tr.slots, 1000, "never beyond the window")
	// Complete out of order: everything but 20, then 20.
	for o := int64(1019); o > 20; o-- {
		_, err := tr.Complete(o)
		require.NoError(t, err)
	}
	next, _ := tr.Position()
	require.Equal(t, int64(20), next)
	_, err := tr.Complete(20)
	require.NoError(t, err)
	next, meta := tr.Position()
	require.Equal(t, int64(1020), next)
	require.Equal(t, int64(1019), meta)
}

// TestTrackerScenarios runs the scenarios in testdata/tracker (pebble's
// datadriven format; go test ./commit -run TrackerScenarios -rewrite
// rewrites the expected output from what the tracker does). Commands:
//
//	new start=N window=N [span=N] [meta=N] [above=(a,b,…)]
//	begin [key=K] [meta=M] O…          O: an offset or a range A-B (inclusive)
//	begin-completed [key=K] [meta=M] O…
//	complete O…
//	abandon O…
//	next                                 the position and its meta
//	state                                everything the tracker reports
//
// A record's meta defaults to its offset, so the meta of the position names
// the last record of the completed prefix. Every command that changes the
// tracker prints one line per offset, then the position.
func TestTrackerScenarios(t *testing.T) {
	var tr *Tracker
	datadriven.RunTest(t, "testdata/tracker", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "new" && tr == nil {
			td.Fatalf(t, "%s before new", td.Cmd)
		}
		var b strings.Builder
		switch td.Cmd {
		case "new":
			var start int64
			var window int
			td.ScanArgs(t, "start", &start)
			td.ScanArgs(t, "window", &window)
			tr = NewTracker(start, window)
			if td.HasArg("span") {
				var span int
				td.ScanArgs(t, "span", &span)
				tr.SetSpan(span)
			}
			if td.HasArg("meta") {
				var meta int64
				td.ScanArgs(t, "meta", &meta)
				tr.SetInitialMeta(meta)
			}
			if a, ok := td.Arg("above"); ok {
				above := make([]int64, len(a.Vals))
				for i := range a.Vals {
					a.Scan(t, i, &above[i])
				}
				tr.SetCompletedAbove(above)
			}
			return trackerState(tr)
		case "begin", "begin-completed", "complete", "abandon":
			var key uint64
			td.MaybeScanArgs(t, "key", &key)
			meta, fixed := int64(0), td.MaybeScanArgs(t, "meta", new(int64))
			if fixed {
				td.ScanArgs(t, "meta", &meta)
			}
			for _, o := range scenarioOffsets(t, td) {
				m := o
				if fixed {
					m = meta
				}
				var advanced bool
				var err error
				switch td.Cmd {
				case "begin":
					err = tr.BeginKey(o, m, key)
				case "begin-completed":
					advanced, err = tr.beginCompletedKey(o, m, key)
				case "complete":
					advanced, err = tr.Complete(o)
				case "abandon":
					err = tr.Abandon(o)
				}
				fmt.Fprintf(&b, "%s %d: ", td.Cmd, o)
				switch {
				case err != nil:
					b.WriteString(err.Error())
				case advanced:
					b.WriteString("advanced")
				default:
					b.WriteString("ok")
				}
				b.WriteByte('\n')
			}
			next, meta := tr.Position()
			fmt.Fprintf(&b, "next=%d meta=%d", next, meta)
			return b.String()
		case "next":
			next, meta := tr.Position()
			return fmt.Sprintf("next=%d meta=%d", next, meta)
		case "state":
			return trackerState(tr)
		}
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	})
}

// scenarioOffsets reads a command's positional offsets (N or A-B).
func scenarioOffsets(t *testing.T, td *datadriven.TestData) []int64 {
	var out []int64
	for _, a := range td.CmdArgs {
		if len(a.Vals) > 0 {
			continue // key=…, meta=…
		}
		lo, hi, isRange := strings.Cut(a.Key, "-")
		from, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			td.Fatalf(t, "offset %q: %v", a.Key, err)
		}
		to := from
		if isRange {
			if to, err = strconv.ParseInt(hi, 10, 64); err != nil || to < from {
				td.Fatalf(t, "range %q", a.Key)
			}
		}
		for o := from; ; o++ {
			out = append(out, o)
			if o == to { // not o <= to: to may be math.MaxInt64
				break
			}
		}
	}
	return out
}

func trackerState(tr *Tracker) string {
	next, meta := tr.Position()
	limit := "none"
	if l := tr.BeginLimit(); l != math.MaxInt64 {
		limit = strconv.FormatInt(l, 10)
	}
	return fmt.Sprintf("next=%d meta=%d\nin-flight=%d occupied=%d/%d completed-above=%d abandoned=%d begin-limit=%s\ncarried=%v",
		next, meta, tr.InFlight(), tr.Occupied(), tr.Window(), tr.CompletedAbove(), tr.abandoned, limit,
		tr.AppendCompletedAbove(nil))
}

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
		advanced, got = c.tr.beginCompletedKey(op.offset, op.meta, op.key)
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
