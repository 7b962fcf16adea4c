package chain

import (
	"context"
	"time"
)

// idleCheck, in eager mode with records waiting for the leader's read
// frontier, asks whether the log shows the leader idle at the live tail
// once the leader has read everything fetched (tailGap), and then lets
// through the records the gap releases (check). Otherwise it returns when
// to ask again and the end check's answer to wait for.
func (g *keyGate) idleCheck(ctx context.Context) (released bool, at time.Time, answer <-chan struct{}, err error) {
	if len(g.front) == 0 {
		return false, time.Time{}, nil, nil
	}
	s := g.s
	if rn, _ := g.l.rd.load(); rn < s.p.ring.High() {
		return false, time.Time{}, nil, nil // its frontier moves: block waits for it
	}
	ok, at, answer := s.p.tailGap(ctx, s)
	if !ok {
		return false, at, answer, nil
	}
	return true, time.Time{}, nil, g.serviceFront(true)
}

// block waits, in eager mode, while the stage has nothing else to do,
// until ch fires, a key moves, the leader's read frontier moves for a
// record waiting on it, the leader may have become idle, or ctx ends
// (its error). It returns at once when one of those already happened; the
// caller serves the gate and checks its own condition again.
func (g *keyGate) block(ctx context.Context, ch <-chan struct{}) error {
	wk := g.wake.wait()
	var rsig <-chan struct{}
	if len(g.front) > 0 {
		rsig = g.l.readSig.wait()
	}
	if g.hasMoved.Load() || g.frontMoved() {
		return nil
	}
	released, at, answer, err := g.idleCheck(ctx)
	if err != nil || released {
		return err
	}
	var tc <-chan time.Time
	if !at.IsZero() {
		timer := time.NewTimer(time.Until(at))
		defer timer.Stop()
		tc = timer.C
	}
	select {
	case <-ch:
	case <-wk:
	case <-rsig:
	case <-tc:
	case <-answer:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
