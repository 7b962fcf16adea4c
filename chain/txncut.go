package chain

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"
)

// cycleCut is how a stage's records meet its mode's commit cycles: the
// stage calls it at every begin, completion, drop and send, without asking
// which mode it runs in.
//
//   - atLeastOnce: the commit loop commits any contiguous prefix, so
//     nothing is counted, and every send goes to the Producer at once.
//   - txnCut (exactly-once mode): a cycle cuts the stage at its begin
//     frontier and waits for the records below the cut; the sends of the
//     records at or above it wait until the cycle's transaction ended (see
//     "A cycle's cut" below).
//
// handle's direct path (stageRun.direct) runs only in atLeastOnce, whose
// begin and completion do nothing, so beginCompleted and beginLate do not
// call it.
type cycleCut interface {
	// begunLocked notes that record o was begun, stream being the stream
	// time including it; under the stage's mu.
	begunLocked(o, stream int64)
	// settledLocked notes that the begun record o completed or was dropped,
	// under the stage's mu. It reports whether o was the last record the
	// open cycle waits for: the caller then notifies drained.
	settledLocked(o int64) bool
	// dropped is settledLocked for a drop, with the stage's mu not held
	// (taken only if there is something to count).
	dropped(o int64) bool
	// produce sends record o's outputs, deadLetter its dead letter; done
	// is called with the acknowledgement. sp is the record's span.
	produce(o int64, sp RecordSpan, msgs []Message, done func(error))
	deadLetter(o int64, sp RecordSpan, m Message, done func(error))
	// sendFailed reports whether the mode itself takes the failed send of
	// record o (err is its RecordError), having dropped the record; on
	// false the stage drops it and fails the partition.
	sendFailed(o int64, err error) bool
}

// atLeastOnce is the cycleCut of a chain without WithExactlyOnce.
type atLeastOnce struct{ s *stageRun }

func (atLeastOnce) begunLocked(int64, int64)     {}
func (atLeastOnce) settledLocked(int64) bool     { return false }
func (atLeastOnce) dropped(int64) bool           { return false }
func (atLeastOnce) sendFailed(int64, error) bool { return false }
func (a atLeastOnce) produce(_ int64, _ RecordSpan, msgs []Message, done func(error)) {
	a.s.p.c.cfg.producer.Produce(a.s.work, msgs, done)
}

func (a atLeastOnce) deadLetter(_ int64, _ RecordSpan, m Message, done func(error)) {
	ProduceDeadLetter(a.s.work, a.s.p.c.cfg.producer, m, done)
}

// A cycle's cut (DESIGN.md "Exactly-once mode"). Exactly-once mode keeps
// the admission step, so every stage begins its records in offset order:
// the records a stage has begun are the offsets below its begin frontier.
// A cycle does not pause the stages: it takes each stage's frontier — the
// cut — and the transaction holds exactly the records below the cuts.
// Records at or above a cut keep being begun and processed (their state
// writes go to the store's pending writes, tagged with their offsets, as
// before), but their sends — outputs and dead letters — are deferred
// (sendGate): kept in the order they were issued and handed to the
// Transactor only once the cycle's transaction has committed, as the first
// sends of the next one. So no Produce is in progress while the cycle
// commits (the Transactor's contract), and no output of a record above a
// cut is in a transaction that commits positions below it.
//
// The set below the cuts is closed: a follower begins a record only once
// its leader has begun every record the record's rule names (the
// admission step; the offset gate needs them completed), so its records
// below its cut depend only on leader records begun before — taking the
// cuts from the last stage to the first makes those fall below the
// leader's cut, which is taken later. The cycle waits until every record
// below the cuts completed (pend), takes each stage's position as
// min(contiguous position, cut) — records above the cut that completed
// are left to the next cycle: the store's checkpoint persists only the
// writes of records below the positions — and commits.

// txnCut is a stage's cycleCut in exactly-once mode.
type txnCut struct {
	s  *stageRun
	tc *txnCoordinator

	// Guarded by the stage's mu (s.mu), which every begin and completion
	// holds, so a cut is taken between two begins. live counts the records
	// begun and neither completed nor dropped; begunNext is the begin
	// frontier (every offset below it begun, none at or above it), begunWM
	// the stream time including the record below it; cutAt is the open
	// cycle's cut (the begin frontier when the cycle took it;
	// math.MinInt64 before the first).
	live, begunNext, begunWM int64
	cutAt                    int64
	// pend counts the records below cutAt still live: the cycle waits
	// until it is zero (written under s.mu, read without it), woken by
	// s.drained.
	pend atomic.Int64
}

func newTxnCut(s *stageRun, tc *txnCoordinator, next, wm int64) *txnCut {
	return &txnCut{s: s, tc: tc, begunNext: next, begunWM: wm, cutAt: math.MinInt64}
}

func (c *txnCut) begunLocked(o, stream int64) {
	c.live++
	c.begunNext, c.begunWM = o+1, stream
}

func (c *txnCut) settledLocked(o int64) bool {
	c.live--
	return o < c.cutAt && c.pend.Add(-1) == 0
}

func (c *txnCut) dropped(o int64) bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.settledLocked(o)
}

func (c *txnCut) produce(o int64, sp RecordSpan, msgs []Message, done func(error)) {
	s := c.s
	c.send(o, sp, done, func(msgs []Message, done func(error)) {
		c.tc.noteOutputs(len(msgs))
		s.p.c.cfg.producer.Produce(s.work, msgs, done)
	}, msgs)
}

func (c *txnCut) deadLetter(o int64, sp RecordSpan, m Message, done func(error)) {
	s := c.s
	c.send(o, sp, done, func(_ []Message, done func(error)) {
		c.tc.noteOutputs(1)
		ProduceDeadLetter(s.work, s.p.c.cfg.producer, m, done)
	}, nil)
}

// sendFailed takes a send that failed because the transaction cannot
// commit (ErrTransaction) — not the record's fault: the next cycle aborts
// it and restarts the partitions. Key-gated followers' records waiting for
// it are dropped before this drop, so before a drain can see the stage
// empty and a rewind build the next epoch.
func (c *txnCut) sendFailed(o int64, err error) bool {
	if !errors.Is(err, ErrTransaction) {
		return false
	}
	c.s.doomFollowers()
	c.s.drop(o)
	c.tc.fail(err)
	return true
}

// send sends record o's outputs or dead letter (send(msgs, done)): now,
// done being called with the acknowledgement; or deferred (see sendGate),
// and then the record completes at once (done(nil)).
//
// A deferred record need not wait for its acknowledgement to complete.
// Its sends go into the next transaction, which also carries the first
// positions that cover it (this cycle's stop at its cut); that cycle's
// drain waits for every deferred send's acknowledgement (lateAcks), and a
// send that fails makes that cycle abort (lateFailed). So the record frees
// its in-flight slot and counts for its followers' gate while the cycle
// commits, instead of a whole cycle later — the hot key's chain of records
// does not stall for every commit.
func (c *txnCut) send(o int64, sp RecordSpan, done func(error), send func([]Message, func(error)), msgs []Message) {
	s := c.s
	d := &s.p.txn.sends
	d.mu.Lock()
	switch {
	case d.discard:
		d.mu.Unlock()
		s.discardSend(o, sp)
		return
	case d.cut != nil && o >= d.cut[s.idx]:
		d.list = append(d.list, deferredSend{s: s, o: o, send: send, msgs: slices.Clone(msgs)})
		d.mu.Unlock()
		done(nil)
		return
	}
	d.mu.Unlock()
	send(msgs, done)
}

// txnCut returns the stage's cut in exactly-once mode (the coordinator's
// side: taking a cut, waiting for it).
func (s *stageRun) txnCut() *txnCut { return s.cut.(*txnCut) }

// cutPoint is a stage's cut: its begin frontier and the stream time below
// it (the stage's watermark once everything below the frontier completed).
type cutPoint struct{ next, wm int64 }

// takeCut takes the partition's cut (the coordinator, at a cycle's
// start): under each stage's mu, which every begin holds, so a record is
// begun either before the cut (counted in pend, its sends direct) or after
// it (its sends deferred); from the last stage to the first (see above).
func (p *partitionRun) takeCut() []cutPoint {
	d := &p.txn.sends
	cuts := make([]cutPoint, len(p.stages))
	d.mu.Lock()
	d.cut = make([]int64, len(p.stages))
	for i := range d.cut {
		d.cut[i] = math.MaxInt64 // until the stage's own cut below
	}
	d.mu.Unlock()
	for i := len(p.stages) - 1; i >= 0; i-- {
		s := p.stages[i]
		c := s.txnCut()
		s.mu.Lock()
		f := c.begunNext
		cuts[i] = cutPoint{next: f, wm: c.begunWM}
		c.cutAt = f
		c.pend.Store(c.live)
		d.mu.Lock()
		d.cut[i] = f
		d.mu.Unlock()
		s.mu.Unlock()
	}
	return cuts
}
