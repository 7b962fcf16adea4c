package chain

import (
	"context"
	"hash/maphash"
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// keyGate is the follower side of the key-scoped gate (GateKey, DESIGN §3
// "Gate scope") of one stage. The stage goroutine owns it, except moved
// and hasMoved, which the leader's completions write under the leader's mu.
//
// A record goes through two steps:
//
//  1. Admission, in offset order (admission): the stage waits until its
//     leader has *begun* everything the record's rule names — its read
//     frontier is past o + OffsetDistance and, for a record the stage
//     processes, its read stream time exceeds t + Lateness (that is, it has
//     read past q(t + Lateness)) — or until the leader is idle. Then the
//     stage computes stream time, begins the record in its tracker and
//     sequences it (Sequencer: dedup).
//  2. The key gate (offer, service): the record runs once the leader has
//     no pending record of its key at or below o + OffsetDistance (a′) and,
//     when processing, none whose stream time before it is ≤ t + Lateness,
//     i.e. none below q(t + Lateness) (b′) — the leader's keyTable answers
//     from the key's oldest pending record. Otherwise it waits in its key's
//     queue (one key's records stay in offset order); the leader hands the
//     key back when it moved far enough, and the stage serves it between
//     records and while it waits for anything else.
//
// Why admission waits for the leader's read frontier and not only for q to
// be known: every record the stage has begun then depends only on records
// its leader has already begun. A stop makes the stages stop beginning
// records, and every begun record of the leader finishes (by induction
// from the first stage, which has no gate), so the records waiting in the
// gate are released and finish too: the drain is bounded by the in-flight
// windows and the completed set ends contiguous, so a clean stop repeats
// nothing (I6) without offsets above the position in the metadata. See
// DESIGN.md "The key-scoped gate".
type keyGate struct {
	s, l   *stageRun
	queues map[uint64]gateQueue // key → records waiting, in offset order
	free   []*gated
	// size counts the records waiting (Stats; the drain's condition).
	size atomic.Int64
	// wake is notified when the leader put a key on moved.
	wake signal
	// moved is guarded by the leader's mu; hasMoved says it is not empty
	// (checked without the lock before every record and before blocking).
	moved, spare []uint64
	hasMoved     atomic.Bool
	// doomed: a record of this stage's leader (or of a stage before it)
	// was dropped because the open transaction failed (exactly-once mode,
	// ErrTransaction); the records waiting here may wait for it, which
	// never completes in this epoch, and the epoch is rewound anyway:
	// they are dropped (see doomFollowers).
	doomed atomic.Bool
}

type gateQueue struct{ head, tail *gated }

// gated is a begun record waiting in the key gate.
type gated struct {
	ev     Event
	stream int64 // S(o)
	kh     uint64
	act    gatedAct
	reason error // actDeadLetter
	accept bool  // the stage's filter accepted it (BeginInfo.Processing)
	want   want
	next   *gated
}

type gatedAct uint8

const (
	actProcess gatedAct = iota
	actSkip
	actDeadLetter
)

// want is what a record waits for at its leader: no pending record of its
// key with offset ≤ off or stream time before it ≤ s. idle: admitted by
// the leader's idleness (then off is o itself and s is unbounded).
type want struct {
	off, s int64
	idle   bool
}

func newKeyGate(s, l *stageRun) *keyGate {
	return &keyGate{s: s, l: l, queues: make(map[uint64]gateQueue)}
}

// movedLocked hands kh to the follower; the leader holds its mu. It reports
// that the follower must be woken.
func (g *keyGate) movedLocked(kh uint64) bool {
	g.moved = append(g.moved, kh)
	g.hasMoved.Store(true)
	return true
}

// loopKeyed is loop for a stage with the key-scoped gate: it admits records
// in offset order until the stage stops, then drains the gate.
func (s *stageRun) loopKeyed(ctx context.Context) error {
	defer s.closePoller()
	g := s.kg
	if err := s.admitAll(ctx); err != nil {
		g.dropAll()
		return err
	}
	return g.drain()
}

// admitAll reads and admits records until ctx ends or the claim ends (nil)
// or a fatal error.
func (s *stageRun) admitAll(ctx context.Context) error {
	return s.eachRecord(ctx, s.admitKeyed)
}

// admitKeyed admits one record (see keyGate) and offers it to the gate.
func (s *stageRun) admitKeyed(ctx context.Context, ev *Event) error {
	g := s.kg
	if err := g.service(); err != nil {
		return err
	}
	valid := ev.Err == nil
	accept := valid && (s.st.Filter == nil || s.st.Filter(ev))
	s.startSpan(ev, accept) // before admission: the span's gate wait covers both steps
	w, err := s.admission(ctx, ev, accept)
	if err != nil {
		ev.endSpan(OutcomeDropped, err)
		return err
	}
	streamBefore := s.stream
	if valid {
		if t := ev.Time.UnixNano(); t > s.stream {
			s.stream = t
		}
	}
	kh := s.p.keyHash(ev.Key)
	pre := s.preDone(ev.Offset)
	if err := s.begin(ctx, ev.Offset, kh, streamBefore); err != nil {
		ev.endSpan(OutcomeDropped, err)
		return err
	}
	act, reason := actProcess, error(nil)
	switch {
	case pre:
		// Completed by an earlier run, its effects persisted with the
		// set (closed under reads-from: no earlier record of its key is
		// waiting here). Not sequenced, not processed.
		ev.endSpan(OutcomeSkipped, nil)
		s.complete(ev.Offset, kh)
		return nil
	case !accept:
		act = actSkip // other types; invalid records (dead-lettered by the first stage)
	case s.seq != nil:
		s.pc.reset(ev.Offset, unixTime(streamBefore))
		skip, err := s.seq.Sequence(s.pc, ev)
		switch {
		case err != nil && IsFatal(err):
			s.drop()
			ev.endSpan(OutcomeDropped, err)
			return s.recordError(ev.Offset, err)
		case err != nil:
			act, reason = actDeadLetter, err
		case skip:
			act = actSkip
		}
	}
	return g.offer(ev, streamBefore, kh, act, reason, accept, w)
}

// admission waits until the leader has begun everything record ev's rule
// names — read frontier > o + OffsetDistance and, when processing, read
// stream time > t + Lateness — or is idle, serving moved keys meanwhile.
// It returns what the record then waits for in the key gate.
func (s *stageRun) admission(ctx context.Context, ev *Event, processing bool) (want, error) {
	l, g, cfg := s.leader, s.kg, &s.p.c.cfg
	o := ev.Offset
	w := want{off: o + cfg.offsetDistance, s: math.MinInt64}
	if processing {
		w.s = addSaturating(ev.Time.UnixNano(), int64(cfg.lateness))
	}
	var ch <-chan struct{}
	spins := 0
	for {
		if rn, rs := l.rd.load(); rn > w.off && rs > w.s {
			return w, nil
		}
		if ch == nil {
			if err := g.service(); err != nil {
				return w, err
			}
			if spins < gateSpins {
				spins++
				runtime.Gosched()
				continue
			}
			ch = l.readSig.wait() // register, then check again (see signal)
			continue
		}
		wk := g.wake.wait()
		if g.hasMoved.Load() {
			ch = nil
			continue
		}
		// A leader that has read everything fetched can only release the
		// record by going idle: then also wait for its position to reach
		// the end (its progress), and arm the idle deadline once it has.
		var lp <-chan struct{}
		if rn, _ := l.rd.load(); rn >= s.p.ring.High() {
			lp = l.progress.wait()
		}
		var timer *time.Timer
		var tc <-chan time.Time
		var answer <-chan struct{}
		if ln := l.cp.next.Load(); ln > o {
			idle, at, ans := s.p.leaderIdle(ctx, ln)
			if idle {
				s.idles.Add(1)
				return want{off: o, s: math.MinInt64, idle: true}, nil
			}
			if !at.IsZero() {
				timer = time.NewTimer(time.Until(at))
				tc = timer.C
			}
			answer = ans
		}
		select {
		case <-ch:
		case <-wk:
		case <-lp:
		case <-tc:
		case <-answer:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return w, ctx.Err()
		}
		ch = nil
	}
}

// offer runs a begun record now if its key has nothing waiting and the
// leader's progress on the key allows it, else queues it behind its key.
// ev is only read during the call.
func (g *keyGate) offer(ev *Event, stream int64, kh uint64, act gatedAct, reason error, accept bool, w want) error {
	q, busy := g.queues[kh]
	if !busy {
		ok, fo, fs := g.check(kh, w)
		if ok {
			return g.release(ev, stream, kh, act, reason, accept, w, fo, fs)
		}
	}
	if g.doomed.Load() {
		ev.endSpan(OutcomeDropped, ErrTransaction)
		g.s.drop()
		return nil
	}
	r := g.newGated()
	r.ev, r.stream, r.kh, r.act, r.reason, r.accept, r.want = *ev, stream, kh, act, reason, accept, w
	if q.tail == nil {
		q.head = r
	} else {
		q.tail.next = r
	}
	q.tail = r
	g.queues[kh] = q
	g.size.Add(1)
	return nil
}

// check asks the leader whether no record of kh is pending within w, and
// returns the leader's progress on the key: (off, s) such that every record
// of kh below off is complete and s = S(off). If the answer is no, the
// leader now watches the key for w.
func (g *keyGate) check(kh uint64, w want) (ok bool, off, s int64) {
	l := g.l
	// The read frontier first: every record below it that is pending is in
	// the table (begin registers it before the frontier is published).
	rn, rs := l.rd.load()
	l.mu.Lock()
	ok, pending, po, ps := l.keys.check(kh, w.off, w.s)
	l.mu.Unlock()
	if pending {
		return ok, po, ps
	}
	return ok, rn, rs
}

// service runs the records of the keys the leader handed back, as far as
// the leader's progress on each allows.
func (g *keyGate) service() error {
	if !g.hasMoved.Load() {
		return nil
	}
	l := g.l
	l.mu.Lock()
	moved := g.moved
	g.moved = g.spare[:0]
	g.hasMoved.Store(false)
	l.mu.Unlock()
	if g.doomed.Load() { // after hasMoved was cleared: see doomFollowers
		g.spare = moved[:0]
		g.dropAll()
		return nil
	}
	var err error
	for _, kh := range moved {
		if err = g.releaseKey(kh); err != nil {
			break
		}
	}
	g.spare = moved[:0]
	return err
}

// releaseKey runs kh's waiting records from the oldest while the leader's
// progress allows; the first that must still wait registers the watch.
func (g *keyGate) releaseKey(kh uint64) error {
	for {
		q, ok := g.queues[kh]
		if !ok {
			return nil
		}
		r := q.head
		ok, fo, fs := g.check(kh, r.want)
		if !ok {
			return nil
		}
		if q.head = r.next; q.head == nil {
			delete(g.queues, kh)
		} else {
			g.queues[kh] = q
		}
		g.size.Add(-1)
		err := g.release(&r.ev, r.stream, kh, r.act, r.reason, r.accept, r.want, fo, fs)
		g.put(r)
		if err != nil {
			return err
		}
	}
}

// release begins the record's work, the leader's progress on its key being
// (fo, fs): skip, dead-letter, or process (inline or on a key-parallel
// worker). Processing uses the work context: a record begun is not dropped
// by a stop, only by the shutdown timeout (DESIGN "Stopping").
func (g *keyGate) release(ev *Event, stream int64, kh uint64, act gatedAct, reason error, accept bool, w want, fo, fs int64) error {
	s := g.s
	if ob := s.p.c.cfg.observer; ob != nil || ev.span != nil {
		b := BeginInfo{
			Topic: s.p.topic, Partition: s.p.partition, Stage: s.idx, Offset: ev.Offset,
			EventTime: ev.Time, Processing: accept,
			LeaderNext: fo, LeaderWatermark: unixTime(fs), Idle: w.idle, KeyScope: true,
		}
		if ob != nil {
			ob.Begin(b)
		}
		if ev.span != nil {
			ev.span.Begun(b)
		}
	}
	switch act {
	case actSkip:
		s.skipped.Add(1)
		ev.endSpan(OutcomeSkipped, nil)
		s.complete(ev.Offset, kh)
		return nil
	case actDeadLetter:
		s.deadLetter(ev, kh, reason)
		return nil
	}
	if s.disp != nil {
		return s.disp.dispatch(s.work, ev, stream, kh)
	}
	return s.process(s.pc, ev, stream, kh)
}

// drain runs the records still waiting in the gate after the stage stopped
// admitting: their leaders' records were begun and finish, so they are
// released in turn. A fatal error or the shutdown timeout drops them
// instead (not completed, so not committed).
func (g *keyGate) drain() error {
	s := g.s
	for g.size.Load() > 0 {
		if s.p.fatal() != nil || s.work.Err() != nil {
			g.dropAll()
			return nil
		}
		wk := g.wake.wait()
		if err := g.service(); err != nil {
			g.dropAll()
			return err
		}
		if g.size.Load() == 0 || g.hasMoved.Load() {
			continue
		}
		select {
		case <-wk:
		case <-s.work.Done():
		case <-s.p.failed:
		}
	}
	return nil
}

// doomFollowers is called in exactly-once mode when a record of s is
// dropped because the open transaction failed (ErrTransaction), before the
// drop: the cycle that follows aborts and rewinds the partition, and the
// record never completes in this epoch. Records of key-scoped stages after
// s that wait in their gates for it (or for records waiting for it) would
// wait until the shutdown timeout — the cycle's drain and the rewind's stop
// both wait for them, and the rewind then fails the partition. They are
// dropped instead (not completed, not committed; the rewound epoch
// processes them again). Each gate's stage is woken through hasMoved,
// stored after doomed, and service checks doomed after clearing hasMoved,
// so a gate cannot miss it; a record offered later is dropped at once if
// it cannot run. The flags belong to this epoch's gates: a rewind builds
// new ones.
func (s *stageRun) doomFollowers() {
	for st := s; st.keys != nil; st = st.keys.follower.s {
		g := st.keys.follower
		g.doomed.Store(true)
		g.hasMoved.Store(true)
		g.wake.notify()
	}
}

// dropAll abandons every waiting record (not completed: the position stays
// below them and they are processed again by the next owner).
func (g *keyGate) dropAll() {
	for kh, q := range g.queues {
		for r := q.head; r != nil; {
			next := r.next
			r.ev.endSpan(OutcomeDropped, nil)
			g.s.drop()
			g.size.Add(-1)
			g.put(r)
			r = next
		}
		delete(g.queues, kh)
	}
}

func (g *keyGate) newGated() *gated {
	if n := len(g.free); n > 0 {
		r := g.free[n-1]
		g.free = g.free[:n-1]
		return r
	}
	return new(gated)
}

func (g *keyGate) put(r *gated) {
	*r = gated{}
	g.free = append(g.free, r)
}

// readKeyedBuffer is the buffered-mode read of a key-scoped stage: like
// Ring.Read, but while no record is available it serves the keys its
// leader hands back.
func (s *stageRun) readKeyedBuffer(ctx context.Context) ([]Event, error) {
	ring, g := s.p.ring, s.kg
	for {
		if b, err := ring.TryRead(s.cursor, s.batch[:0], false); err != nil || len(b) > 0 {
			return b, err
		}
		if err := g.service(); err != nil {
			return nil, err
		}
		ch := ring.Changed()
		wk := g.wake.wait()
		if g.hasMoved.Load() {
			continue
		}
		if b, err := ring.TryRead(s.cursor, s.batch[:0], false); err != nil || len(b) > 0 {
			return b, err
		}
		select {
		case <-ch:
		case <-wk:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// keyHash is the key identity of the key-scoped gate (see keyTable).
func (p *partitionRun) keyHash(key []byte) uint64 {
	return maphash.Bytes(p.keySeed, key)
}
