package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/differential-dev/differential/buffer"
	"github.com/differential-dev/differential/commit"
)

// eosRun is a partition's exactly-once state (WithExactlyOnce; txn.go has
// the coordinator).
//
// An epoch is one incarnation of the partition's stages, fetcher and
// workers. The first starts when the partition registers with the
// coordinator; an aborted cycle replaces it (rewind) with stages at the
// last committed positions over a store partition reopened without its
// overlay. mu orders a rewind (the coordinator's goroutine) against the
// stop (the partition's): the stop takes the current epoch under mu and
// marks the partition stopping, after which no rewind rebuilds it.
type eosRun struct {
	// paused is set by the coordinator while a cycle runs: stages do not
	// begin records (enterCycle). resumed is notified when it is cleared.
	paused  atomic.Bool
	resumed signal
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

// runExactlyOnce is run's part after the stages are built, in exactly-once
// mode: the partition registers with the coordinator (which starts its
// first epoch), runs until ctx ends (revoke, shutdown, fatal error, the
// claim's end), stops beginning records and drains, and then waits for the
// cycle that commits its final checkpoint — a revoke returns only after
// EndTxn (or the abort).
func (p *partitionRun) runExactlyOnce(runCtx, workCtx context.Context, cancelWork context.CancelFunc, first []Record) error {
	e := &p.eos
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
// eos.mu or before anyone else can see the partition.
func (p *partitionRun) startEpoch(first []Record) {
	e := &p.eos
	ctx, cancel := context.WithCancel(e.runCtx)
	e.cancelEpoch = cancel
	e.g = p.launch(ctx, e.workCtx, first)
}

// stopEpoch is the first half of a rewind after an aborted cycle (the
// coordinator calls it while the partition is paused): the current epoch's
// stages, fetcher and workers stop, and records still in flight finish or
// are dropped. It reports false when the partition did not stop for a
// rewind — it is stopping anyway, or its records did not stop in time (then
// the partition fails) — and the partition must leave the cycles: its
// stages are not at a committed position, so nothing of them may be
// committed any more. On true it returns with eos.mu held, for
// restartEpoch: the partition's own stop waits until the rewind is done.
//
// Records in flight may still produce while they stop, into whatever
// transaction is open by then — the one after the abort. The coordinator
// therefore aborts again once every partition's epoch has stopped, before
// any restarts (txnCoordinator.abort): otherwise those outputs would
// commit with the next cycle, and again when the record is processed anew.
func (p *partitionRun) stopEpoch() bool {
	e := &p.eos
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
// true (eos.mu held; released here): the partition restarts at its last
// committed positions with its store overlay dropped. It reports false when
// the restart failed (the partition fails and leaves the cycles).
func (p *partitionRun) restartEpoch() bool {
	e := &p.eos
	defer e.mu.Unlock()
	if p.ps != nil {
		// Pebble holds exactly the committed state (written only after
		// CommitTxn); the aborted cycle's writes are only in the overlay,
		// which closing the partition drops.
		if err := p.ps.Close(); err != nil {
			p.log.Warn("closing partition state", "err", err)
		}
		ps, err := p.c.cfg.store.OpenPartition(p.topic, p.partition, p.c.names)
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
	for p.ring.High() < p.eos.refetch {
		recs, err = pl.Fetch(ctx, recs[:0])
		if err != nil {
			if ctx.Err() == nil {
				p.fail(fmt.Errorf("fetch: re-reading [%d, %d) after an aborted transaction: %w", p.start, p.eos.refetch, err))
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
		clear(recs)
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

// enterCycle is called before a stage begins a record in exactly-once
// mode. It returns with entering set once no cycle is running; while one
// runs it waits. The cycle sets paused, then waits until every stage has
// entering clear and nothing outstanding; the stage sets entering, then
// checks paused. Go's atomics are sequentially consistent, so either the
// stage sees paused (and waits), or the cycle sees entering (and waits for
// leaveCycle, after which the record is counted in outstanding): no record
// is begun unseen by a cycle's drain.
//
// A key-scoped stage serves its gate while it waits (DESIGN.md
// "Exactly-once with the key-scoped gate"): the records waiting there are
// begun, so the cycle's drain waits for them, and they wait only for
// records their leader has begun, which complete during the pause. Serving
// begins nothing (it runs records already counted in outstanding), so the
// drain's condition holds; a stage that slept on resumed instead would hold
// them, and the drain would wait until the shutdown timeout and abort.
func (s *stageRun) enterCycle(ctx context.Context) error {
	e, g := &s.p.eos, s.kg
	for {
		s.entering.Store(true)
		if !e.paused.Load() {
			return nil
		}
		s.leaveCycle()
		if g != nil {
			if err := g.service(); err != nil {
				return err
			}
		}
		ch := e.resumed.wait()
		var wk <-chan struct{}
		if g != nil {
			// Register, then check (see signal): a key handed back
			// after the check wakes the wait.
			if wk = g.wake.wait(); g.hasMoved.Load() {
				continue
			}
		}
		if !e.paused.Load() {
			continue
		}
		select {
		case <-ch:
		case <-wk:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leaveCycle ends enterCycle (after the record was begun, or not).
func (s *stageRun) leaveCycle() {
	s.entering.Store(false)
	s.drained.notify()
}
