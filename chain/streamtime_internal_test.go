package chain

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stepEvents builds decoded events at offsets from 0 with the given event
// times in seconds; a negative time makes an invalid record (Err set, and
// an event time far above every other, which must not count).
func stepEvents(secs ...int) []Event {
	evs := make([]Event, len(secs))
	for i, s := range secs {
		evs[i].Offset = int64(i)
		if s < 0 {
			evs[i].Err = errors.New("undecodable")
			evs[i].Time = time.Unix(1e6, 0)
			continue
		}
		evs[i].Time = time.Unix(int64(s), 0)
	}
	return evs
}

func sec(s int) int64 { return time.Unix(int64(s), 0).UnixNano() }

// q(x) is 1 + the offset of the first valid record whose event time
// exceeds x: equal and decreasing event times do not move stream time,
// invalid records neither. The gate horizon is max(o + OffsetDistance + 1,
// q(t + Lateness)), or the idle horizon when smaller, and is not known
// while no noted record passes t + Lateness and the noted records do not
// reach the idle gap.
func TestStreamStepsQAndGateHorizon(t *testing.T) {
	//             off: 0   1  2  3  4   5  6   7  8
	evs := stepEvents(10, 10, 9, -1, 12, 11, 12, 20, 15)
	g := newStreamSteps(nil)
	g.note(evs[:4])
	g.note(evs[2:]) // read again by a poller: skipped, then the rest
	for _, c := range []struct {
		x     int
		q     int64
		found bool
	}{
		{x: 0, q: 1, found: true},   // record 0 (10 s) exceeds it
		{x: 9, q: 1, found: true},   //
		{x: 10, q: 5, found: true},  // 1 (equal), 2 (smaller), 3 (invalid) do not; 4 (12 s) does
		{x: 11, q: 5, found: true},  //
		{x: 12, q: 8, found: true},  // 5 and 6 do not exceed 12 s; 7 (20 s) does
		{x: 19, q: 8, found: true},  //
		{x: 20, q: 0, found: false}, // nothing noted exceeds it
	} {
		hint := int(c.x) % 7 // any start gives the same answer
		q, found, noted := g.q(sec(c.x), &hint)
		require.Equal(t, c.found, found, "x=%d", c.x)
		require.Equal(t, c.q, q, "x=%d", c.x)
		require.Equal(t, int64(9), noted)
	}

	p := &partitionRun{c: &Chain{cfg: config{offsetDistance: 0, lateness: 0}}, steps: g}
	none := int64(math.MaxInt64)
	for _, c := range []struct {
		name       string
		o          int64
		t          int
		processing bool
		stream     int // S(o), seconds; -1: none
		d          int64
		lateness   time.Duration
		idle       int64
		h          int64
		known      bool
	}{
		{name: "first record, the next one equal", o: 0, t: 10, processing: true, stream: -1, idle: none, h: 5, known: true},
		{name: "equal time", o: 1, t: 10, processing: true, stream: 10, idle: none, h: 5, known: true},
		{name: "late record: S(o) past it, rule (a) only", o: 2, t: 9, processing: true, stream: 10, idle: none, h: 3, known: true},
		{name: "not processed: rule (a) only", o: 4, t: 12, processing: false, stream: 10, idle: none, h: 5, known: true},
		{name: "offset distance dominates", o: 4, t: 12, processing: true, stream: 10, d: 5, idle: none, h: 10, known: true},
		{name: "lateness moves q", o: 0, t: 10, processing: true, stream: -1, lateness: 2 * time.Second, idle: none, h: 8, known: true},
		{name: "idle gap before q", o: 1, t: 10, processing: true, stream: 10, idle: 3, h: 3, known: true},
		{name: "idle gap after q", o: 1, t: 10, processing: true, stream: 10, idle: 7, h: 5, known: true},
		{name: "q not noted yet", o: 8, t: 15, processing: true, stream: 20, lateness: 10 * time.Second, idle: none, known: false},
		{name: "q not noted, the idle gap noted", o: 7, t: 20, processing: true, stream: 12, idle: 9, h: 9, known: true},
		{name: "q not noted, the idle gap beyond the noted records", o: 7, t: 20, processing: true, stream: 12, idle: 11, known: false},
		{name: "saturated lateness: only idleness", o: 0, t: 10, processing: true, stream: -1, lateness: time.Duration(math.MaxInt64), idle: 4, h: 4, known: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.c.cfg.offsetDistance, p.c.cfg.lateness = c.d, c.lateness
			stream := int64(math.MinInt64)
			if c.stream >= 0 {
				stream = sec(c.stream)
			}
			hint := 0
			h, known := p.gateHorizon(c.o, time.Unix(int64(c.t), 0), c.processing, stream, c.idle, &hint)
			require.Equal(t, c.known, known)
			if known {
				require.Equal(t, c.h, h)
			}
		})
	}
}

// A full step array is replaced by one without the steps below the
// floor (the slowest stage's position); lookups at offsets at or above it answer as before,
// and a reader holding the old array still reads valid steps.
func TestStreamStepsTrimBelowTheFloor(t *testing.T) {
	committed := int64(0)
	g := newStreamSteps(func() int64 { return committed })
	n := 3 * minSteps
	secs := make([]int, n)
	for i := range secs {
		secs[i] = i + 1 // every record a step
	}
	evs := stepEvents(secs...)
	g.note(evs[:minSteps])
	old := g.pub.Load()
	committed = int64(minSteps - 10)
	g.note(evs[minSteps:])
	cur := g.pub.Load()
	require.NotSame(t, old, cur)
	require.Equal(t, int64(minSteps-10), cur.s[0].off, "trimmed below the floor")
	require.LessOrEqual(t, len(cur.s), 4*n, "bounded by what is above the floor")
	require.Equal(t, int64(minSteps), old.n.Load())
	for o := int(committed); o < n-1; o++ {
		hint := 0
		q, found, _ := g.q(sec(o+1), &hint) // x = the time of record o
		require.True(t, found)
		require.Equal(t, int64(o+2), q, "o=%d", o)
	}
	hint := 0
	_, found, noted := g.q(sec(n), &hint)
	require.False(t, found)
	require.Equal(t, int64(n), noted)
}

// Looking q up allocates nothing (it runs for every record a follower
// processes).
func TestStreamStepsLookupAllocatesNothing(t *testing.T) {
	g := newStreamSteps(nil)
	g.note(stepEvents(1, 2, 3, 4, 5))
	p := &partitionRun{c: &Chain{cfg: config{}}, steps: g}
	hint := 0
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = p.gateHorizon(1, time.Unix(2, 0), true, sec(1), math.MaxInt64, &hint)
	})
	require.Zero(t, allocs)
}

// The galloping search from any hint finds what a binary search over the
// whole array finds.
func TestSearchStepsFromAnyHint(t *testing.T) {
	for n := range 40 {
		s := make([]step, n)
		for i := range s {
			s[i] = step{off: int64(3 * i), t: int64(2 * i)}
		}
		for x := int64(-2); x <= int64(2*n+1); x++ {
			want := searchSteps(s, func(st step) bool { return st.t > x })
			for h := -1; h <= n+1; h++ {
				require.Equal(t, want, searchStepsFrom(s, x, h), "n=%d x=%d h=%d", n, x, h)
			}
		}
	}
}
