package chain

import (
	"context"
	"math"
)

// loopKeyed is loop for a stage with the key-scoped gate: it admits records
// in offset order until the stage stops, then drains the gate.
func (s *stageRun) loopKeyed(ctx context.Context) error {
	defer s.closePoller()
	g := s.kg
	if err := s.admitAll(ctx); err != nil {
		g.dropAll()
		return err
	}
	if g.eager {
		return g.drainEager()
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
	if accept && !s.p.horizonKnown(ev.Offset) {
		if err := s.awaitHorizon(ctx, ev.Offset); err != nil {
			ev.endSpan(OutcomeDropped, err)
			return err
		}
	}
	if accept && ev.Offset < s.p.restoredEnd {
		// A leader resumed past the record may let it through before the
		// fetcher reached q(t + Lateness): its horizon must be known by
		// the time the gate releases it (keyGate.release).
		if _, ok := s.p.gateHorizon(ev.Offset, ev.Time, true, s.stream, s.p.gaps.horizon(ev.Offset), &s.stepHint); !ok {
			if _, err := s.awaitGateHorizon(ctx, ev, true, s.stream); err != nil {
				ev.endSpan(OutcomeDropped, err)
				return err
			}
		}
	}
	var w want
	if g.eager {
		// No admission step: the record is begun now and waits in the
		// gate until its rule's check is known, too.
		w = want{o: ev.Offset, off: ev.Offset + s.p.c.cfg.offsetDistance, s: math.MinInt64}
		if accept {
			w.s = addSaturating(ev.Time.UnixNano(), int64(s.p.c.cfg.lateness))
		}
	} else {
		var err error
		if w, err = s.admission(ctx, ev, accept); err != nil {
			ev.endSpan(OutcomeDropped, err)
			return err
		}
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
		s.completePre(ev.Offset, kh)
		return nil
	case !accept:
		act = actSkip // other types; invalid records (dead-lettered by the first stage)
	case s.seq != nil:
		var err error
		if act, reason, err = s.sequence(ev, streamBefore); err != nil {
			return err
		}
	}
	return g.offer(ev, streamBefore, kh, act, reason, accept, w)
}

// admission waits until the leader has begun everything record ev's rule
// names — read frontier > o + OffsetDistance and, when processing, read
// stream time > t + Lateness — or the log shows it idle after a record
// L ≥ o that it has begun (gapLog), serving moved keys meanwhile. It
// returns what the record then waits for in the key gate.
func (s *stageRun) admission(ctx context.Context, ev *Event, processing bool) (want, error) {
	l, g, cfg := s.leader, s.kg, &s.p.c.cfg
	o := ev.Offset
	w := want{o: o, off: o + cfg.offsetDistance, s: math.MinInt64}
	if processing {
		w.s = addSaturating(ev.Time.UnixNano(), int64(cfg.lateness))
	}
	res := w
	err := s.leaderWait(ctx, &l.readSig, g, func() bool {
		rn, rs := l.rd.load()
		if rn > w.off && rs > w.s {
			return true
		}
		if gl, ok := s.p.gaps.first(o); ok && gl < rn {
			s.idles.Add(1)
			res = idleWant(o, gl)
			return true
		}
		return false
	}, func() bool {
		// A leader that has read everything fetched can only release the
		// record by the log showing it idle at the tail.
		rn, _ := l.rd.load()
		return rn >= s.p.ring.High()
	})
	if err != nil {
		return w, err
	}
	return res, nil
}

// offer runs a begun record now if its key has nothing waiting and the
// leader's progress on the key allows it, else queues it behind its key.
// ev is only read during the call.
func (g *keyGate) offer(ev *Event, stream int64, kh uint64, act gatedAct, reason error, accept bool, w want) error {
	q, busy := g.queues[kh]
	if !busy {
		var ok, front bool
		var fo, fs int64
		ok, front, fo, fs, w = g.check(kh, w)
		if ok {
			return g.release(ev, stream, kh, act, reason, accept, w, fo, fs)
		}
		if front {
			g.front[kh] = struct{}{}
		}
	}
	if g.doomed.Load() {
		ev.endSpan(OutcomeDropped, ErrTransaction)
		g.s.drop(ev.Offset)
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
// leader now watches the key for w — unless front: in eager mode, the
// leader has not read far enough for the answer to be known (its read
// frontier is not past w, nor past a gap of the log at or after the
// record), and the record waits for the frontier. It returns the want to
// keep: in eager mode, an idle one once the log shows the leader idle
// after a record it has read.
func (g *keyGate) check(kh uint64, w want) (ok, front bool, off, s int64, _ want) {
	l := g.l
	// The read frontier first: every record below it that is pending is in
	// the table (begin registers it before the frontier is published).
	rn, rs := l.rd.load()
	if g.eager && !w.idle && (rn <= w.off || rs <= w.s) {
		gl, gap := g.s.p.gaps.first(w.o)
		if !gap || gl >= rn {
			return false, true, rn, rs, w
		}
		w = idleWant(w.o, gl)
		g.s.idles.Add(1)
	}
	l.mu.Lock()
	ok, pending, po, ps := l.keys.check(kh, w.off, w.s)
	l.mu.Unlock()
	if pending {
		return ok, false, po, ps, w
	}
	return ok, false, rn, rs, w
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
		if g.eager {
			if b, err := ring.TryRead(s.cursor, s.batch[:0], false); err != nil || len(b) > 0 {
				return b, err
			}
			if err := g.block(ctx, ch); err != nil {
				return nil, err
			}
			continue
		}
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
