package chain

// service runs the records of the keys the leader handed back, and in
// eager mode those its read frontier now lets through, as far as the
// leader's progress on each allows.
func (g *keyGate) service() error {
	if err := g.serviceFront(false); err != nil {
		return err
	}
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
		ok, front, fo, fs, w := g.check(kh, r.want)
		r.want = w
		if !ok {
			if front {
				g.front[kh] = struct{}{}
			}
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
	// Known: the leader read past q(t + Lateness) − 1 or past the idle gap
	// (both noted before it could read them), or admission waited for it
	// below the restored end. Unknown would leave only the idle horizon.
	idle := s.p.gaps.horizon(ev.Offset)
	if h, ok := s.p.gateHorizon(ev.Offset, ev.Time, accept, stream, idle, &s.stepHint); ok {
		ev.asOf = h
	} else {
		ev.asOf = idle
	}
	if ob := s.p.c.cfg.observer; ob != nil || ev.span != nil {
		if w.idle {
			fo = w.off + 1 // released against the leader position past the gap
		}
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

// frontMoved reports whether the leader's read frontier moved since the
// keys on front were last checked.
func (g *keyGate) frontMoved() bool {
	if len(g.front) == 0 {
		return false
	}
	rn, rs := g.l.rd.load()
	return rn != g.seenN || rs != g.seenS
}

// serviceFront checks the keys waiting for the leader's read frontier
// again when it moved (or always, with force).
func (g *keyGate) serviceFront(force bool) error {
	if len(g.front) == 0 || (!force && !g.frontMoved()) {
		return nil
	}
	g.seenN, g.seenS = g.l.rd.load()
	keys := g.frontScratch[:0]
	for kh := range g.front {
		keys = append(keys, kh)
	}
	clear(g.front)
	var err error
	for i, kh := range keys {
		if err = g.releaseKey(kh); err != nil {
			for _, k := range keys[i+1:] {
				g.front[k] = struct{}{}
			}
			break
		}
	}
	g.frontScratch = keys[:0]
	return err
}
