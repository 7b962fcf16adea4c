package chain

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// streamSteps is the partition's stream time over the log, for the horizon
// of a follower's record (Context.Horizon): the offsets at which S rises,
// with the event time it rises to. S(q) > x exactly when q is past a step
// whose time exceeds x, so q(x) — the smallest offset whose stream time
// exceeds x — is 1 + the offset of the first step with a time > x, found
// by binary search. The partition gate's rule (b), wm(leader) > t +
// Lateness, needs the leader's position at q(t + Lateness), since a
// stage's watermark is S at its position; the key-scoped gate's (b′)
// names the same bound per key.
//
// The fetcher and polling stages note decoded records in offset order
// (records at or below the last one noted are the same log read again and
// are skipped), before any stage can read them, so a leader that has read
// past q(x)−1 makes q(x) known. Followers read without a lock: the steps
// live in an array whose published length only grows; a full array is
// replaced by a copy without the steps below floor (stepFloor: no stage
// processes a record below it again), and a reader still holding the old
// one reads valid steps. The array thus holds at most the records between
// the slowest stage and the fetched end, 16 bytes a step, and is copied
// once per doubling.
//
// A lookup at offset o only needs the steps at offsets ≥ o: when S(o) > x
// some step below o is above x and q(x) ≤ o, which the gate's rule (a)
// already covers (the caller checks it first). That is also why the
// running maximum may start from nothing where the fetcher starts: a step
// it finds there that the log's true stream time does not have lies below
// S(o) for every record a stage still processes.
type streamSteps struct {
	mu      sync.Mutex // writers: the fetcher and polling stages
	have    bool
	lastOff int64
	max     int64
	floor   func() int64

	cur *stepArray // guarded by mu; published in pub
	pub atomic.Pointer[stepArray]
	// noted is 1 + the last offset noted (0: none), stored after the steps
	// it covers.
	noted atomic.Int64
}

type stepArray struct {
	s []step
	n atomic.Int64 // published length
}

type step struct{ off, t int64 }

// minSteps is the capacity the step array starts with.
const minSteps = 256

func newStreamSteps(floor func() int64) *streamSteps {
	g := &streamSteps{max: math.MinInt64, floor: floor, cur: &stepArray{s: make([]step, minSteps)}}
	g.pub.Store(g.cur)
	return g
}

// note records the stream time steps of evs (decoded, in offset order).
// Invalid records (Err != nil) do not move stream time.
func (g *streamSteps) note(evs []Event) {
	if g == nil || len(evs) == 0 {
		return
	}
	g.mu.Lock()
	a := g.cur
	n := int(a.n.Load())
	for i := range evs {
		ev := &evs[i]
		if g.have && ev.Offset <= g.lastOff {
			continue
		}
		g.have, g.lastOff = true, ev.Offset
		if ev.Err != nil {
			continue
		}
		t := ev.Time.UnixNano()
		if t <= g.max {
			continue
		}
		g.max = t
		if n == len(a.s) {
			a.n.Store(int64(n))
			a = g.replace(a, n)
			n = int(a.n.Load())
		}
		a.s[n] = step{off: ev.Offset, t: t}
		n++
	}
	a.n.Store(int64(n))
	if g.have {
		g.noted.Store(g.lastOff + 1)
	}
	g.mu.Unlock()
}

// replace publishes a copy of the full array a (n steps) without the steps
// below the floor, with room for as many again.
func (g *streamSteps) replace(a *stepArray, n int) *stepArray {
	lo := 0
	if g.floor != nil {
		f := g.floor()
		lo = searchSteps(a.s[:n], func(s step) bool { return s.off >= f })
	}
	keep := n - lo
	b := &stepArray{s: make([]step, max(2*keep, minSteps))}
	copy(b.s, a.s[lo:n])
	b.n.Store(int64(keep))
	g.cur = b
	g.pub.Store(b)
	return b
}

// q returns q(x) = 1 + the offset of the first noted step with a time > x
// (found), and noted, 1 + the last offset noted: when not found, q(x) >
// noted. hint is the caller's index of its last answer: a stage's
// records ask for nearby steps, so the search gallops from there.
func (g *streamSteps) q(x int64, hint *int) (q int64, found bool, noted int64) {
	noted = g.noted.Load() // before the steps: they cover it
	a := g.pub.Load()
	s := a.s[:a.n.Load()]
	i := searchStepsFrom(s, x, *hint)
	*hint = i
	if i == len(s) {
		return 0, false, noted
	}
	return s[i].off + 1, true, noted
}

// searchSteps is sort.Search over s for a predicate that is false, then
// true.
func searchSteps(s []step, f func(step) bool) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(s[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// stepFloor is the offset below which no stage processes a record again:
// the slowest stage's position, or in exactly-once mode the committed
// offset (a rewind resumes the stages there, and the steps the fetcher
// reads again are not noted twice).
func (p *partitionRun) stepFloor() int64 {
	if p.c.tc != nil {
		return p.committed.Load()
	}
	v := p.view.Load()
	if v == nil {
		return p.committed.Load()
	}
	f := int64(math.MaxInt64)
	for _, s := range v.stages {
		f = min(f, s.cp.next.Load())
	}
	return f
}

// searchStepsFrom is the index of the first step of s with a time > x
// (len(s): none), found by galloping from index h to bracket it, then
// binary search.
func searchStepsFrom(s []step, x int64, h int) int {
	n := len(s)
	if n == 0 {
		return 0
	}
	h = min(max(h, 0), n-1)
	lo, hi := 0, n // the answer is in [lo, hi]
	if s[h].t > x {
		hi = h
		for d := 1; ; d <<= 1 {
			j := h - d
			if j < 0 {
				break
			}
			if s[j].t <= x {
				lo = j + 1
				break
			}
			hi = j
		}
	} else {
		lo = h + 1
		for d := 1; ; d <<= 1 {
			j := h + d
			if j >= n {
				break
			}
			if s[j].t > x {
				hi = j
				break
			}
			lo = j + 1
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].t <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// gateHorizon is H(o) of a follower's record at offset o with event time t
// (processing: the stage processes it; stream: S(o)): the smallest leader
// position the gate's rule needs, P = max(o + OffsetDistance + 1,
// q(t + Lateness)) — rule (a) alone for a record the stage does not
// process — or the idle horizon idle (gapLog.horizon) when smaller. known
// is false when q is not known yet: no noted record's event time exceeds
// t + Lateness and the noted records do not reach the idle gap either.
// hint is the calling stage's (streamSteps.q).
// A live gate never lets such a record through (its leader read past
// q − 1, or past the gap); after a restart or a rewind a leader resumed
// past the record can, and the caller waits for the fetcher.
func (p *partitionRun) gateHorizon(o int64, t time.Time, processing bool, stream, idle int64, hint *int) (h int64, known bool) {
	cfg := &p.c.cfg
	a := o + cfg.offsetDistance + 1
	if !processing {
		return min(a, idle), true
	}
	x := addSaturating(t.UnixNano(), int64(cfg.lateness))
	if stream > x || a >= idle {
		return min(a, idle), true // q(x) ≤ o, or the idle gap comes first
	}
	q, found, noted := p.steps.q(x, hint)
	if !found {
		if idle <= noted {
			return idle, true // q(x) > noted ≥ idle
		}
		return 0, false
	}
	return min(max(a, q), idle), true
}

// horizon is the horizon of the follower's record ev (stream: S(o)),
// waiting for the fetcher when it is not known yet (see gateHorizon).
func (s *stageRun) horizon(ctx context.Context, ev *Event, processing bool, stream int64) (int64, error) {
	p := s.p
	if h, ok := p.gateHorizon(ev.Offset, ev.Time, processing, stream, p.gaps.horizon(ev.Offset), &s.stepHint); ok {
		return h, nil
	}
	return s.awaitGateHorizon(ctx, ev, processing, stream)
}

// awaitGateHorizon waits until the horizon of ev is known: the fetcher (or
// a polling stage) noted a record whose event time exceeds t + Lateness,
// or reached a gap of the log at or after ev — at the live tail, the tail
// decision that the leader is idle, asked once the leader has read
// everything fetched.
func (s *stageRun) awaitGateHorizon(ctx context.Context, ev *Event, processing bool, stream int64) (int64, error) {
	p := s.p
	for {
		ch := p.ring.Changed()
		select {
		case <-ch:
			ch = nil // closed ring: nothing more will be appended
		default:
		}
		idle := p.gaps.horizon(ev.Offset)
		if h, ok := p.gateHorizon(ev.Offset, ev.Time, processing, stream, idle, &s.stepHint); ok {
			return h, nil
		}
		if p.ring.High() >= p.restoredEnd {
			// Every record the restored leaders processed is noted, and q
			// is not among them: q lies past them, where the leaders have
			// read nothing the fetcher did not note first, so the gate
			// itself holds the record until q is known or the log shows
			// the leader idle. Waiting here instead would stop the stage's
			// reading, and with it its own followers' view of the tail.
			return idle, nil
		}
		var at time.Time
		var answer <-chan struct{}
		if s.leaderReadAll() {
			var ok bool
			if ok, at, answer = p.tailGap(ctx, s); ok {
				continue
			}
		}
		if err := waitFor(ctx, ch, at, answer); err != nil {
			return 0, err
		}
	}
}

// leaderReadAll reports whether the stage's leader has passed everything
// fetched (partition scope: completed; key scope: read), so that only the
// log showing it idle at the tail can end a wait for it.
func (s *stageRun) leaderReadAll() bool {
	var n int64
	if s.kg != nil {
		n, _ = s.leader.rd.load()
	} else {
		n, _ = s.leader.cp.load()
	}
	return n >= s.p.ring.High()
}
