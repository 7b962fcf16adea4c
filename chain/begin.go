package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/differential-dev/differential/commit"
)

// begin registers offset o (key hash kh, stream time sBefore before it) in
// the tracker — and in the key table when the follower is key-scoped —
// waiting while the in-flight window is full. The tracker's meta is the
// stream time including o: once the position passes o, that is the
// stage's watermark. A key-scoped stage serves the keys its leader hands
// back while it waits (its waiting records are what fills the window).
func (s *stageRun) begin(ctx context.Context, o int64, kh uint64, sBefore int64) error {
	for {
		err := s.tryBegin(o, kh, sBefore)
		if err == nil || !errors.Is(err, commit.ErrWindowFull) {
			return err
		}
		if s.kg != nil {
			if err := s.kg.service(); err != nil {
				return err
			}
		}
		ch := s.progress.wait()
		if err := s.tryBegin(o, kh, sBefore); err == nil || !errors.Is(err, commit.ErrWindowFull) {
			return err
		}
		if s.kg != nil && s.kg.eager {
			// The window (or the span) is full of records that may wait
			// for the leader's frontier or idleness: block serves those.
			if err := s.kg.block(ctx, ch); err != nil {
				return err
			}
			continue
		}
		var wk <-chan struct{}
		if s.kg != nil {
			if wk = s.kg.wake.wait(); s.kg.hasMoved.Load() {
				continue
			}
		}
		select {
		case <-ch:
		case <-wk:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// preDone reports whether the record at o was completed above the
// restored position by an earlier run (see pre), forgetting the offsets
// below o: the stage never reads them again.
func (s *stageRun) preDone(o int64) bool {
	for len(s.pre) > 0 && s.pre[0] < o {
		s.pre = s.pre[1:]
	}
	return len(s.pre) > 0 && s.pre[0] == o
}

// checkpoint returns the stage's published checkpoint and, when it
// carries them, the offsets completed above its position that may be
// carried (commit.Tracker.AppendCompletedAbove: closed under reads-from).
func (s *stageRun) checkpoint() commit.Checkpoint {
	if !s.carry {
		s.mu.Lock()
		next, wm := s.cp.load()
		var above []int64
		if len(s.mu.keep) > 0 {
			// The restored offsets still above the position: completed
			// by an earlier run, not processed again by this one, so
			// they must stay in the metadata (a subset of the restored
			// set, which was closed under reads-from, plus what is now
			// below the position: closed too).
			pos, _ := s.mu.tracker.Position()
			lo := max(next, pos)
			i := 0
			for i < len(s.mu.keep) && s.mu.keep[i] < lo {
				i++
			}
			s.mu.keep = s.mu.keep[i:]
			if len(s.mu.keep) > 0 {
				above = slices.Clone(s.mu.keep)
			}
		}
		s.mu.Unlock()
		return commit.Checkpoint{Stage: s.name, Next: next, Watermark: wm, Above: above}
	}
	s.mu.Lock()
	next, wm := s.cp.load() // stored under mu: consistent with the tracker
	above := s.mu.tracker.AppendCompletedAbove(nil)
	s.mu.Unlock()
	// The published position may lag the tracker's (a begin over a gap
	// moves the tracker without publishing): every offset carried is
	// above both.
	if len(above) == 0 {
		above = nil
	}
	return commit.Checkpoint{Stage: s.name, Next: next, Watermark: wm, Above: above}
}

// tryBegin is one attempt of begin: nil, commit.ErrWindowFull or a misuse
// error. A key table's follower reads the frontier rd after the table: the
// record is in the table before the frontier passes it.
func (s *stageRun) tryBegin(o int64, kh uint64, sBefore int64) error {
	s.mu.Lock()
	err := s.mu.tracker.BeginKey(o, s.stream, kh)
	if err == nil && s.keys != nil {
		s.keys.begin(kh, o, sBefore)
	}
	if err == nil {
		s.cut.begunLocked(o, s.stream)
	}
	s.room = s.mu.tracker.Window() - s.mu.tracker.Occupied()
	s.limit = s.mu.tracker.BeginLimit()
	s.mu.Unlock()
	switch {
	case err == nil:
		s.outstanding.Add(1)
		if s.keys != nil {
			s.rd.store(o+1, s.stream)
			s.readSig.notify()
		}
		return nil
	case errors.Is(err, commit.ErrWindowFull):
		return err
	}
	return fmt.Errorf("stage %q: %w", s.name, err)
}

// beginCompleted begins and completes o in the tracker under one lock: a
// record handle ran before beginning it (see run) that completed at once.
// Only the stage goroutine calls it, with the window known to have room.
// It is complete for a stage without a key table, the begin included.
func (s *stageRun) beginCompleted(o int64) {
	if co := s.p.c.cfg.completion; co != nil {
		co.Completed(s.p.topic, s.p.partition, s.idx, o)
	}
	s.mu.Lock()
	adv, err := s.mu.tracker.BeginCompleted(o, s.stream)
	var next, wm int64
	if adv {
		next, wm = s.mu.tracker.Position()
		s.cp.store(next, wm)
	}
	s.room = s.mu.tracker.Window() - s.mu.tracker.Occupied()
	s.limit = s.mu.tracker.BeginLimit()
	s.mu.Unlock()
	s.completed(adv, next, wm, err)
}

// beginLate enters o in the tracker: a record handle ran before beginning
// it (see run) that did not complete at once. It is already counted in
// outstanding.
func (s *stageRun) beginLate(o int64) error {
	s.mu.Lock()
	err := s.mu.tracker.Begin(o, s.stream)
	s.room = s.mu.tracker.Window() - s.mu.tracker.Occupied()
	s.limit = s.mu.tracker.BeginLimit()
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stage %q: %w", s.name, err)
	}
	return nil
}
