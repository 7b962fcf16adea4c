package chain

import (
	"fmt"
)

// complete marks o done. The new checkpoint is published under mu, as one
// value (published), so two completers cannot publish out of order and no
// reader pairs a position with another position's watermark.
//
// kh is the record's key hash when the stage keeps a key table (its
// follower is key-scoped); a follower woken for the key runs its waiting
// records. A CompletionObserver hears of the completion first, so it has
// always heard of it before any follower acts on it.
func (s *stageRun) complete(o int64, kh uint64) {
	if co := s.p.c.cfg.completion; co != nil {
		co.Completed(s.p.topic, s.p.partition, s.idx, o)
	}
	s.completeTracked(o, kh)
}

// completePre completes a record an earlier run completed (preDone): in
// the tracker and the key table, without telling the observers again.
func (s *stageRun) completePre(o int64, kh uint64) { s.completeTracked(o, kh) }

// completeTracked is complete without the completion observers.
func (s *stageRun) completeTracked(o int64, kh uint64) {
	s.mu.Lock()
	adv, err := s.mu.tracker.Complete(o)
	var next, wm int64
	if adv {
		next, wm = s.mu.tracker.Position()
		s.cp.store(next, wm)
	}
	wake := err == nil && s.keys != nil && s.keys.complete(kh, o)
	cut := s.cut.settledLocked(o)
	s.mu.Unlock()
	if wake {
		s.keys.follower.wake.notify()
	}
	if cut {
		s.drained.notify()
	}
	s.completed(adv, next, wm, err)
}

// completed is the rest of a completion, after the tracker's: the failure,
// the progress signal and observer, the drain's count.
func (s *stageRun) completed(adv bool, next, wm int64, err error) {
	if err != nil {
		s.p.fail(fmt.Errorf("stage %q: %w", s.name, err))
	}
	if adv {
		s.progress.notify()
		if ob := s.p.c.cfg.observer; ob != nil {
			ob.Advanced(s.p.topic, s.p.partition, s.idx, next, unixTime(wm))
		}
	}
	if s.outstanding.Add(-1) == 0 {
		s.drained.notify()
	}
}

// drop abandons the begun record o without completing it: the position
// stays below it, so it is not committed and will be processed again.
func (s *stageRun) drop(o int64) {
	if s.cut.dropped(o) {
		s.drained.notify()
	}
	if s.outstanding.Add(-1) == 0 {
		s.drained.notify()
	}
}
