package chain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/differential-dev/differential/buffer"
	"github.com/differential-dev/differential/commit"
)

// txnRun is a partition's exactly-once state (WithExactlyOnce; txn.go has
// the coordinator).
//
// An epoch is one incarnation of the partition's stages, fetcher and
// workers. The first starts when the partition registers with the
// coordinator; an aborted cycle replaces it (rewind) with stages at the
// last committed positions over a store partition reopened without its
// overlay. mu orders a rewind (the coordinator's goroutine) against the
// stop (the partition's): the stop takes the current epoch under mu and
// marks the partition stopping, after which no rewind rebuilds it.
type txnRun struct {
	// sends defers the outputs and dead letters of records begun after an
	// open cycle's cut until the cycle's transaction has ended.
	sends sendGate
	// part is the partition's registration with the coordinator.
	part *txnPart

	// Set once when the partition starts; read by rewinds.
	runCtx, workCtx context.Context
	cancelWork      context.CancelFunc

	// committed are the positions of the last committed cycle (the
	// restore's at first); the coordinator's goroutine writes them after a
	// commit and reads them in a rewind.
	committed []commit.Checkpoint
	// refetch: the fetcher of a rewound epoch reads [start, refetch)
	// through a poller before the main stream, which has moved on to
	// refetch and cannot seek back.
	refetch int64

	mu          sync.Mutex
	stopping    bool
	g           *goroutines
	cancelEpoch context.CancelFunc
}

// runTxn is run's part after the stages are built, in exactly-once
// mode: the partition registers with the coordinator (which starts its
// first epoch), runs until ctx ends (revoke, shutdown, fatal error, the
// claim's end), stops beginning records and drains, and then waits for the
// cycle that commits its final checkpoint — a revoke returns only after
// EndTxn (or the abort).
func (p *partitionRun) runTxn(runCtx, workCtx context.Context, cancelWork context.CancelFunc, first []Record) error {
	e := &p.txn
	e.runCtx, e.workCtx, e.cancelWork = runCtx, workCtx, cancelWork
	e.committed = p.resume
	tc := p.c.tc
	tc.register(p, func() { p.startEpoch(first) })

	<-runCtx.Done()
	e.mu.Lock()
	e.stopping = true
	g := e.g
	e.mu.Unlock()
	timedOut := p.shutdown(g, cancelWork)
	res := tc.final(p)
	p.log.Info("partition stopped", "committed", p.committed.Load())
	if err := p.fatal(); err != nil {
		return err
	}
	if res != nil {
		p.log.Warn("the partition's final transaction was aborted; the next owner resumes from the last committed cycle, and read_committed readers never see what was aborted",
			"committed", p.committed.Load(), "err", res)
		return errors.Join(ErrFinalCommit, ErrTxnAborted, res)
	}
	if timedOut {
		return ErrShutdownTimeout
	}
	return nil
}

// startEpoch launches the stages, fetcher and workers of a new epoch; under
// txn.mu or before anyone else can see the partition.
func (p *partitionRun) startEpoch(first []Record) {
	e := &p.txn
	ctx, cancel := context.WithCancel(e.runCtx)
	e.cancelEpoch = cancel
	e.g = p.launch(ctx, e.workCtx, first)
}

// stopEpoch is the first half of a rewind after an aborted cycle (the
// coordinator calls it after the cycle dropped the partition's deferred
// sends, discarding any more: see sendGate): the current epoch's
// stages, fetcher and workers stop, and records still in flight finish or
// are dropped. It reports false when the partition did not stop for a
// rewind — it is stopping anyway, or its records did not stop in time (then
// the partition fails) — and the partition must leave the cycles: its
// stages are not at a committed position, so nothing of them may be
// committed any more. On true it returns with txn.mu held, for
// restartEpoch: the partition's own stop waits until the rewind is done.
//
// Records in flight may still produce while they stop, into whatever
// transaction is open by then — the one after the abort. The coordinator
// therefore aborts again once every partition's epoch has stopped, before
// any restarts (txnCoordinator.abort): otherwise those outputs would
// commit with the next cycle, and again when the record is processed anew.
func (p *partitionRun) stopEpoch() bool {
	e := &p.txn
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		return false
	}
	e.cancelEpoch()
	if p.shutdown(e.g, e.cancelWork) {
		p.failRewind(errors.New("exactly-once restart after an aborted transaction: records in flight did not stop within the shutdown timeout"))
		e.mu.Unlock()
		return false
	}
	return true
}

// failRewind is fail for a rewind whose stop timed out. fail ignores errors
// once the shutdown timeout abandoned the records in flight (they are
// theirs); here the abandonment is the failure itself, and ignoring it left
// the partition without stages, out of the cycles, waiting for a stop that
// nothing would send.
func (p *partitionRun) failRewind(err error) {
	p.mu.Lock()
	p.failLocked(err)
}

// restartEpoch is the second half of a rewind, after stopEpoch returned
// true (txn.mu held; released here): the partition restarts at its last
// committed positions with its store overlay dropped. It reports false when
// the restart failed (the partition fails and leaves the cycles).
func (p *partitionRun) restartEpoch() bool {
	e := &p.txn
	defer e.mu.Unlock()
	if p.ps != nil {
		// Pebble holds exactly the committed state (written only after
		// CommitTxn); the aborted cycle's writes are only in the overlay,
		// which closing the partition drops.
		if err := p.ps.Close(); err != nil {
			p.log.Warn("closing partition state", "err", err)
		}
		ps, err := p.c.openState(p.topic, p.partition)
		if err != nil {
			p.fail(fmt.Errorf("exactly-once restart after an aborted transaction: reopen state: %w", err))
			p.ps, p.cs = nil, nil
			return false
		}
		p.ps = ps
		if p.cs != nil {
			p.cs = ps.(ChangelogStore)
		}
	}
	e.refetch = max(e.refetch, p.fetchedEnd)
	p.resumeAt(e.committed)
	p.build()
	e.sends.reset()
	p.startEpoch(nil)
	return true
}

// refill is the first part of a rewound epoch's fetch: the records in
// [start, refetch) come again through a poller. It reports false when the
// partition stops (or failed) meanwhile.
func (p *partitionRun) refill(ctx context.Context) bool {
	pl, err := p.src.Poll(ctx, p.start)
	if err != nil {
		if ctx.Err() == nil {
			p.fail(fmt.Errorf("fetch: reopen the partition at %d after an aborted transaction: %w", p.start, err))
		}
		return false
	}
	defer func() {
		p.closers.Go(func() {
			if err := pl.Close(); err != nil {
				p.log.Warn("closing poller", "err", err)
			}
		})
	}()
	var recs []Record
	evs := make([]Event, 0, p.c.cfg.batchSize)
	for p.ring.High() < p.txn.refetch {
		recs, err = pl.Fetch(ctx, recs[:0])
		if err != nil {
			if ctx.Err() == nil {
				p.fail(fmt.Errorf("fetch: re-reading [%d, %d) after an aborted transaction: %w", p.start, p.txn.refetch, err))
			}
			return false
		}
		evs = evs[:0]
		high := p.ring.High()
		for i := range recs {
			if recs[i].Offset >= high {
				evs = append(evs, p.decode(&recs[i]))
			}
		}
		p.gaps.note(recs) // a batch may reach past what the gap log saw
		clear(recs)
		p.steps.note(evs)
		if len(evs) == 0 {
			continue
		}
		if err := p.ring.Append(ctx, evs); err != nil {
			if ctx.Err() == nil && !errors.Is(err, buffer.ErrClosed) {
				p.fail(fmt.Errorf("fetch: %w", err))
			}
			return false
		}
		clear(evs)
	}
	return true
}

// isAbandoned reports whether the stop's shutdown timeout abandoned records
// in flight.
func (p *partitionRun) isAbandoned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.abandoned
}

// sendGate is where an exactly-once partition's sends go (txnCut.send): to the
// Transactor at once, or — for a record at or above its stage's cut while
// a cycle is open — onto a list the coordinator flushes, in order, into
// the next transaction once the cycle's transaction has committed. A send
// issued while the flush runs waits for it (mu), so it cannot overtake a
// deferred send of its stage: outputs keep their per-key order.
type sendGate struct {
	mu sync.Mutex
	// cut is the open cycle's cut per stage (nil: no cycle is open, or its
	// deferred sends were flushed).
	cut []int64
	// discard: the partition is being rewound (abort) or left the cycles:
	// deferred sends, and any issued from now on, are dropped with their
	// records (discardSend).
	discard bool
	list    []deferredSend
	// late counts the deferred sends flushed into the open transaction
	// and not yet acknowledged (their records have completed: see
	// txnCut.send); the cycle's drain waits for it. One per epoch.
	late *lateAcks
}

// lateAcks counts an epoch's flushed deferred sends still unacknowledged.
type lateAcks struct {
	n    atomic.Int64
	zero signal // notified when n reaches zero
	// ended: the epoch's transaction was aborted (or its partition left):
	// a send of it that fails now fails nothing.
	ended atomic.Bool
}

// deferredSend is one deferred send of record o of stage s: send with
// msgs (a copy: the Producer must not retain the slice it is given, so the
// stage reuses it).
type deferredSend struct {
	s    *stageRun
	o    int64
	send func([]Message, func(error))
	msgs []Message
}

// failed takes the failure of a deferred send whose record has completed:
// the transaction that holds the send also holds the first positions past
// the record, so it must not commit — the cycle aborts and the record runs
// again. A failure that is not the transaction's (the record's own, e.g. a
// message too large) also fails the partition, as it would for a direct
// send.
func (x *deferredSend) failed(late *lateAcks, err error) {
	if late.ended.Load() {
		return
	}
	s := x.s
	err = s.recordError(x.o, fmt.Errorf("deferred send: %w", err))
	s.p.c.tc.fail(err)
	if !errors.Is(err, ErrTransaction) {
		s.p.fail(err)
	}
}

// errSendDiscarded ends the span of a record whose deferred send was
// dropped.
var errSendDiscarded = errors.New("chain: the transaction was aborted before the record's deferred send; the record is processed again")

// discardSend drops record o, whose send was deferred past a cycle that
// aborted (or whose partition left the cycles): it never completes in this
// epoch, like the records in flight that a rewind's stop drops. Key-scoped
// followers waiting for it are dropped too (doomFollowers): the rewind's
// stop would otherwise wait for them until the shutdown timeout.
func (s *stageRun) discardSend(o int64, sp RecordSpan) {
	endSpan(sp, OutcomeDropped, errSendDiscarded)
	s.doomFollowers()
	s.drop(o)
}

// deferAll makes a partition that registers while a cycle runs defer
// every send until that cycle ended: it is not in the cycle, and nothing
// of it may be in the cycle's transaction.
func (d *sendGate) deferAll(stages int) {
	d.mu.Lock()
	d.cut = make([]int64, stages)
	for i := range d.cut {
		d.cut[i] = math.MinInt64
	}
	d.mu.Unlock()
}

// flush hands the deferred sends to the Transactor, in the order they were
// issued, and ends the deferral (the coordinator, after the cycle's
// transaction ended, before the next cycle).
func (d *sendGate) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	late := d.lateAcks()
	for i := range d.list {
		x := d.list[i]
		late.n.Add(1)
		x.send(x.msgs, func(err error) {
			if err != nil {
				x.failed(late, err) // before the count: the drain then sees the failure
			}
			if late.n.Add(-1) == 0 {
				late.zero.notify()
			}
		})
		d.list[i] = deferredSend{}
	}
	d.list, d.cut = d.list[:0], nil
}

// acks returns the epoch's count of flushed deferred sends.
func (d *sendGate) acks() *lateAcks {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lateAcks()
}

// lateAcks is acks under mu.
func (d *sendGate) lateAcks() *lateAcks {
	if d.late == nil {
		d.late = &lateAcks{}
	}
	return d.late
}

// drop discards the deferred sends and every later one (discardSend). The
// records of the deferred ones have completed; they are not committed (the
// cycle that would have carried them is aborted, or their partition left
// after its final cycle), and the epoch that ran them is replaced.
func (d *sendGate) drop() {
	d.mu.Lock()
	d.discard = true
	d.list, d.cut = nil, nil
	if d.late != nil {
		d.late.ended.Store(true)
	}
	d.mu.Unlock()
}

// reset makes a rewound partition's sends direct again (its old epoch has
// stopped: nothing of it sends any more).
func (d *sendGate) reset() {
	d.mu.Lock()
	d.discard, d.list, d.cut, d.late = false, nil, nil, nil
	d.mu.Unlock()
}
