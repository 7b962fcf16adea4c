package chain

import (
	"context"
	"sync"
	"time"
)

// endCheck is a partition's confirmation that its log holds nothing the
// fetcher has not delivered (EndConfirmer): at most one is asked at a time,
// and the last answer is kept for the idle release (valid for IdleTimeout
// after it came) and for Stats (the lag of a stage at a transactional
// tail).
type endCheck struct {
	mu sync.Mutex
	// asking is closed when the check in flight answers; nil when none is.
	asking chan struct{}
	// The last answer: the fetched end it was asked about, when it was
	// asked and answered, and what it said.
	answered  bool
	from      int64
	asked, at time.Time
	end       int64
	more      bool
	err       error
}

// leaderIdle reports whether a leader at position next is idle (DESIGN.md
// "Idle release"): it has completed everything the partition fetched
// (next ≥ ring.High()), nothing arrived for IdleTimeout, and — when the
// Source is an EndConfirmer — a confirmation asked after that deadline
// found nothing in the log past what was fetched but offsets Fetch never
// delivers (markers, aborted or still open transactions). The answer is
// used for IdleTimeout after it came; then it is asked again.
//
// When not idle it says what to wait for besides the leader's progress
// (which the caller always waits on): at, when non-zero, is when to ask
// again (the idle deadline, or the retry of a check that found more or
// failed); answer, when non-nil, is closed when the check in flight
// answers. A check asked here runs on a goroutine of p.closers under ctx.
//
// The high watermark alone cannot decide it: a transactional input keeps
// it above the last record for ever (a commit marker; under read_committed
// also an aborted or open transaction's records), so "high watermark ≤
// fetched" would stall the tail, and "high watermark − fetched ≤ markers"
// cannot be computed without reading the log past what was fetched — which
// is what the check does. Nor can a high watermark seen earlier decide it
// (the probe's is up to a second old, a fetch response's is as stalled as
// the fetcher): only one read after the deadline shows that nothing
// arrived in the log — not merely at this fetcher — for IdleTimeout.
func (p *partitionRun) leaderIdle(ctx context.Context, next int64) (idle bool, at time.Time, answer <-chan struct{}) {
	high := p.ring.High()
	if next < high {
		return false, time.Time{}, nil
	}
	it := p.c.cfg.idleTimeout
	deadline := p.ring.LastAppend().Add(it)
	now := time.Now()
	if now.Before(deadline) {
		return false, deadline, nil
	}
	ec, ok := p.src.(EndConfirmer)
	if !ok {
		return true, time.Time{}, nil
	}
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asking != nil {
		return false, time.Time{}, c.asking
	}
	if c.answered && c.from == high && !c.asked.Before(deadline) {
		expires := c.at.Add(it)
		if now.Before(expires) {
			if c.err == nil && !c.more {
				return true, time.Time{}, nil
			}
			return false, expires, nil // more to fetch (a stalled fetcher), or failed: ask again then
		}
	}
	return false, time.Time{}, p.askEndLocked(ctx, ec, high, now)
}

// askEndLocked starts a check of the log past from (c.mu held) and returns
// the channel closed at its answer.
func (p *partitionRun) askEndLocked(ctx context.Context, ec EndConfirmer, from int64, now time.Time) <-chan struct{} {
	c := &p.endCheck
	done := make(chan struct{})
	c.asking = done
	p.closers.Go(func() {
		end, more, err := ec.ConfirmEnd(ctx, from)
		if err != nil && ctx.Err() == nil {
			p.log.Debug("the idle release's end check failed; asking again after the idle timeout", "from", from, "err", err)
		}
		c.mu.Lock()
		c.answered, c.from, c.asked, c.at = true, from, now, time.Now()
		c.end, c.more, c.err = end, more, err
		c.asking = nil
		c.mu.Unlock()
		close(done)
	})
	return done
}

// checkQuietTail asks the log's end once per fetched end when the whole
// partition has been caught up with what it fetched for IdleTimeout
// (every stage's position ≥ ring.High()) while the source's high watermark
// is beyond it — a transactional tail, or a stalled fetcher — so that
// Stats can tell the two apart even when no follower waits (a one-stage
// chain, or followers that were released): the stages' lag is then zero
// at a tail of markers, and stays positive behind a stalled fetcher. The
// commit loop calls it.
func (p *partitionRun) checkQuietTail(ctx context.Context) {
	ec, ok := p.src.(EndConfirmer)
	if !ok {
		return
	}
	high := p.ring.High()
	if p.src.HighWatermark() <= high {
		return
	}
	for _, s := range p.stages {
		if s.cp.next.Load() < high {
			return
		}
	}
	now := time.Now()
	if now.Before(p.ring.LastAppend().Add(p.c.cfg.idleTimeout)) {
		return
	}
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asking != nil || c.answered && c.from == high && (c.err == nil || now.Before(c.at.Add(p.c.cfg.idleTimeout))) {
		return // asked (and answered, or failed recently) for this end
	}
	p.askEndLocked(ctx, ec, high, now)
}

// confirmedEnd is the last answer that found nothing to fetch past from:
// the log up to end holds nothing Fetch delivers at or after from (ok
// false: none).
func (p *partitionRun) confirmedEnd() (from, end int64, ok bool) {
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.answered || c.err != nil || c.more {
		return 0, 0, false
	}
	return c.from, c.end, true
}

// stageLag is a stage's lag at position next against the high watermark
// hwm (≥ 0): hwm − next, except that a stage that completed everything
// fetched, past which the log was confirmed to hold nothing to deliver up
// to end (markers, aborted records), counts as at end.
func stageLag(hwm, next, from, end int64, confirmed bool) int64 {
	if confirmed && next >= from {
		next = max(next, end)
	}
	return max(hwm-next, 0)
}
