package chain

import (
	"context"
	"sync"
	"sync/atomic"
)

// dispatcher runs a key-parallel stage: up to KeyConcurrency workers, each
// record of a key strictly after the previous one of that key completed
// processing (its outputs are then already handed to the producer, which
// keeps per-partition order). Records of a busy key wait in that key's queue;
// the number of queued and running records is bounded by the stage's
// in-flight window, because every one of them was begun in the tracker.
//
// With a chain-wide worker cap (WithWorkerCap, workerCap), a worker that
// takes a key first takes one of the chain's slots, and between two records
// of the key keeps it or hands it to a key with more records ready. A slot
// is held only while released records run (never while one waits for a
// gate or for the stage), so every holder finishes and frees it.
//
// Stopping: the stage loop stops dispatching, but a record queued behind a
// busy key was begun, and records of other keys after it may already be
// complete — dropping it would leave the position below them, and a restart
// would process them again. So the worker that owns a key runs
// its queue to the end during the drain; only the shutdown timeout (the
// work context ends) or a fatal error of the key's record drops the rest.
type dispatcher struct {
	s       *stageRun
	workCtx context.Context
	work    chan *job
	wg      sync.WaitGroup

	mu struct {
		sync.Mutex
		keys map[string]*keyQueue // key → records waiting behind the running one
		free []*job
	}
}

type job struct {
	ev     Event
	stream int64
	kh     uint64
	next   *job
}

type keyQueue struct {
	head, tail *job
	// ready counts the key's records not yet run: the one a worker holds
	// and those queued behind it (the worker cap's priority).
	ready atomic.Int32
}

func newDispatcher(s *stageRun, workCtx context.Context) *dispatcher {
	work := make(chan *job)
	if s.p.c.workers != nil {
		// Under the worker cap the stage does not wait for a free worker:
		// the workers may all hold keys waiting for a slot, and a stage
		// that stopped reading would leave the hot key's queue to run dry
		// (and its priority with it). Every record in work was begun and
		// is not complete, so the in-flight window bounds it (I9).
		work = make(chan *job, s.p.c.cfg.inFlight)
	}
	d := &dispatcher{s: s, workCtx: workCtx, work: work}
	d.mu.keys = make(map[string]*keyQueue)
	for range s.st.KeyConcurrency {
		pc := s.newContext()
		d.wg.Go(func() { d.worker(pc) })
	}
	return d
}

// dispatch hands a begun record to a worker, or queues it behind its key.
// It blocks while every worker is busy (under the worker cap, never: the
// key waits in work for a worker, see newDispatcher). If ctx ends meanwhile, the record —
// the last one the stage began, its key's only one — is dropped (not
// processed, not committed: nothing after it was begun). A stage whose
// follower is key-scoped, and a key-scoped stage, pass the work context:
// their begun records are waited for (see keyGate), so only the shutdown
// timeout drops them.
func (d *dispatcher) dispatch(ctx context.Context, ev *Event, stream int64, kh uint64) error {
	d.mu.Lock()
	j := d.newJobLocked()
	j.ev, j.stream, j.kh = *ev, stream, kh
	if q, busy := d.mu.keys[string(ev.Key)]; busy {
		if q.tail == nil {
			q.head = j
		} else {
			q.tail.next = j
		}
		q.tail = j
		q.ready.Add(1)
		d.mu.Unlock()
		return nil
	}
	q := &keyQueue{}
	q.ready.Store(1)
	d.mu.keys[string(ev.Key)] = q
	d.mu.Unlock()
	select {
	case d.work <- j:
		return nil
	case <-ctx.Done():
		j.ev.endSpan(OutcomeDropped, ctx.Err())
		o := j.ev.Offset
		d.finishKey(j, true)
		d.s.drop(o)
		return ctx.Err()
	}
}

func (d *dispatcher) newJobLocked() *job {
	if n := len(d.mu.free); n > 0 {
		j := d.mu.free[n-1]
		d.mu.free = d.mu.free[:n-1]
		return j
	}
	return new(job)
}

// worker takes keys from the stage loop and runs each key's records until
// its queue is empty, also while the partition stops (see dispatcher). It
// returns once the stage loop is done dispatching (stop closes work): a
// key-scoped stage still dispatches the records its gate releases while
// the partition drains.
func (d *dispatcher) worker(pc *Context) {
	wc := d.s.p.c.workers
	for j := range d.work {
		var ready *atomic.Int32
		if wc != nil {
			d.mu.Lock()
			ready = &d.mu.keys[string(j.ev.Key)].ready
			d.mu.Unlock()
		}
		if wc != nil && !wc.acquire(d.workCtx, ready) {
			d.abandon(j) // the shutdown timeout
			continue
		}
		for j != nil {
			err := d.s.process(pc, &j.ev, j.stream, j.kh)
			if err != nil {
				d.s.p.fail(err)
			}
			j = d.finishKey(j, err != nil || d.workCtx.Err() != nil)
			if j != nil && wc != nil && !wc.yield(d.workCtx, ready) {
				d.abandon(j)
				j = nil
				ready = nil
			}
		}
		if ready != nil {
			wc.release()
		}
	}
}

// abandon drops j, the next record of its key, and the key's queue: the
// shutdown timeout ended the wait for a slot of the worker cap.
func (d *dispatcher) abandon(j *job) {
	j.ev.endSpan(OutcomeDropped, d.workCtx.Err())
	o := j.ev.Offset
	d.finishKey(j, true)
	d.s.drop(o)
}

// finishKey releases j and returns the next record of its key, or nil (then
// the key is no longer busy). With drop, the key's queued records are
// dropped (not completed, so not committed): j failed fatally — running its
// successors would produce outputs the next owner repeats — or the
// shutdown timeout abandoned the partition's in-flight records.
func (d *dispatcher) finishKey(j *job, drop bool) *job {
	key := string(j.ev.Key)
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.mu.keys[key]
	j.ev, j.next = Event{}, nil
	d.mu.free = append(d.mu.free, j)
	if drop {
		for n := q.head; n != nil; {
			next := n.next
			n.ev.endSpan(OutcomeDropped, nil)
			o := n.ev.Offset
			n.ev, n.next = Event{}, nil
			d.mu.free = append(d.mu.free, n)
			d.s.drop(o)
			n = next
		}
		q.head, q.tail = nil, nil
	}
	if q.head == nil {
		delete(d.mu.keys, key)
		return nil
	}
	n := q.head
	q.head = n.next
	if q.head == nil {
		q.tail = nil
	}
	n.next = nil
	q.ready.Add(-1)
	return n
}

// stop tells the workers that nothing more is dispatched and waits for
// them. A worker returns only with its key's queue empty, so nothing is
// left queued. It is called once the stage loop returned.
func (d *dispatcher) stop() {
	close(d.work)
	d.wg.Wait()
}
