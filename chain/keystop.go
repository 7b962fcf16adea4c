package chain

import (
	"fmt"
)

// drainEager is drain in eager mode. The records waiting here may wait for
// leader records that never run (abandoned by the leader's own stop, or
// never read: the leader's frontier stops with it), so the stage serves
// the gate until its leader has finished — its loop returned and every
// record it began completed or was abandoned — then releases what the
// leader's final state allows and abandons the rest: they stay below the
// position (commit.Tracker.Abandon) and are processed again by the next
// owner, with the records of their key queued behind them (which never
// ran). What completed above the position is carried by the final
// checkpoint, so a clean stop repeats nothing (I6).
func (g *keyGate) drainEager() error {
	s, l := g.s, g.l
	for g.size.Load() > 0 {
		if s.p.fatal() != nil || s.work.Err() != nil {
			g.dropAll()
			return nil
		}
		if err := g.service(); err != nil {
			g.dropAll()
			return err
		}
		if g.size.Load() == 0 {
			return nil
		}
		wk := g.wake.wait()
		var done <-chan struct{}
		select {
		case <-l.loopDone:
			done = l.drained.wait()
			if l.outstanding.Load() == 0 {
				if err := g.serviceFront(true); err != nil {
					g.dropAll()
					return err
				}
				if err := g.service(); err != nil {
					g.dropAll()
					return err
				}
				g.abandonAll()
				return nil
			}
		default:
			done = l.loopDone
		}
		if g.hasMoved.Load() {
			continue
		}
		select {
		case <-wk:
		case <-done:
		case <-s.work.Done():
		case <-s.p.failed:
		}
	}
	return nil
}

// abandonAll gives up every waiting record at a stop (drainEager): not
// completed, never to run in this epoch.
func (g *keyGate) abandonAll() {
	s := g.s
	for kh, q := range g.queues {
		for r := q.head; r != nil; {
			next := r.next
			s.mu.Lock()
			err := s.mu.tracker.Abandon(r.ev.Offset)
			s.mu.Unlock()
			if err != nil {
				s.p.fail(fmt.Errorf("stage %q: %w", s.name, err))
			}
			r.ev.endSpan(OutcomeDropped, nil)
			s.drop(r.ev.Offset)
			g.size.Add(-1)
			g.put(r)
			r = next
		}
		delete(g.queues, kh)
	}
	clear(g.front)
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
			g.s.drop(r.ev.Offset)
			g.size.Add(-1)
			g.put(r)
			r = next
		}
		delete(g.queues, kh)
	}
}
