package chain

import (
	"context"
	"sync"
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
	wg      sync.WaitGroup
	// slots, without the worker cap, holds a token per idle worker and per
	// worker not started yet: dispatch takes one before it hands a record
	// over, so it blocks while KeyConcurrency workers are busy. Under the
	// worker cap it is nil (see newDispatcher) and records wait in
	// mu.pending instead.
	slots chan struct{}

	mu struct {
		sync.Mutex
		keys map[string]*keyQueue // key → records waiting behind the running one
		free []*job
		// freeQueues are the queues of keys no longer busy, for reuse: no
		// worker refers to one once its key left keys (a worker holds a
		// queue's ready only while it runs the key). Both free lists are
		// bounded by the in-flight window.
		freeQueues []*keyQueue
		// idle is a stack of the workers waiting for a key, the one that
		// went idle last on top: dispatch hands a new key to that one, so
		// that a stage whose records do not wait keeps running on the few
		// workers (stacks, contexts) that are warm in the cache instead of
		// cycling through all of them, while work that waits still spreads
		// over every worker.
		idle []*keyWorker
		// pending holds, under the worker cap, the keys dispatched while no
		// worker was idle and all KeyConcurrency were started, in dispatch
		// order; a worker takes the next one before it goes idle. Non-empty
		// only while every worker is busy.
		pending jobQueue
		// workers are the workers started so far, at most KeyConcurrency.
		workers []*keyWorker
	}
}

// keyWorker is one worker's hand-over point: dispatch puts a key's first
// record in next (buffered 1: the worker is idle, so it is empty) and
// closes it when the stage stops.
type keyWorker struct {
	next chan *job
}

// jobQueue is a FIFO of jobs linked through next.
type jobQueue struct{ head, tail *job }

func (q *jobQueue) push(j *job) {
	if q.tail == nil {
		q.head = j
	} else {
		q.tail.next = j
	}
	q.tail = j
}

func (q *jobQueue) pop() *job {
	j := q.head
	if j != nil {
		q.head = j.next
		if q.head == nil {
			q.tail = nil
		}
		j.next = nil
	}
	return j
}

type job struct {
	ev     Event
	stream int64
	kh     uint64
	q      *keyQueue // its key's queue, while the key is busy
	next   *job
}

type keyQueue struct {
	jobs jobQueue // the records queued behind the running one
	// ready counts the key's records not yet run: the one a worker holds
	// and those queued behind it (the worker cap's priority).
	ready backlog
}

func newDispatcher(s *stageRun, workCtx context.Context) *dispatcher {
	n := s.st.KeyConcurrency
	d := &dispatcher{s: s, workCtx: workCtx}
	if s.p.c.workers == nil {
		d.slots = make(chan struct{}, n)
		for range n {
			d.slots <- struct{}{}
		}
	}
	// Under the worker cap the stage does not wait for a free worker: the
	// workers may all hold keys waiting for a slot, and a stage that
	// stopped reading would leave the hot key's queue to run dry (and its
	// priority with it). Every record in pending was begun and is not
	// complete, so the in-flight window bounds it (I9).
	d.mu.keys = make(map[string]*keyQueue)
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
		j.q = q
		q.jobs.push(j)
		d.s.p.c.workers.grow(&q.ready)
		d.mu.Unlock()
		return nil
	}
	q := d.newQueueLocked()
	q.ready.start()
	d.mu.keys[string(ev.Key)] = q
	j.q = q
	if d.slots == nil {
		w := d.popIdleLocked()
		if w == nil && len(d.mu.workers) == d.s.st.KeyConcurrency {
			d.mu.pending.push(j)
			d.mu.Unlock()
			return nil
		}
		d.handLocked(w, j)
		return nil
	}
	d.mu.Unlock()
	select {
	case <-d.slots:
	case <-ctx.Done():
		j.ev.endSpan(OutcomeDropped, ctx.Err())
		o := j.ev.Offset
		d.finishKey(j, true)
		d.s.drop(o)
		return ctx.Err()
	}
	// A token stands for an idle worker or one not started yet: a worker
	// pushes itself on idle before it returns its token.
	d.mu.Lock()
	d.handLocked(d.popIdleLocked(), j)
	return nil
}

// handLocked hands j to w, or with w nil to a new worker, and unlocks mu.
// Workers start when a key finds none idle: a stage whose records do not
// wait runs on about as many workers as there are cores, however large its
// KeyConcurrency, and the goroutines it never needed cost nothing (a
// garbage collection scans every goroutine's stack).
func (d *dispatcher) handLocked(w *keyWorker, j *job) {
	if w != nil {
		d.mu.Unlock()
		w.next <- j
		return
	}
	w = &keyWorker{next: make(chan *job, 1)}
	d.mu.workers = append(d.mu.workers, w)
	d.mu.Unlock()
	w.next <- j
	pc := d.s.newContext()
	d.wg.Go(func() { d.worker(w, pc) })
}

// popIdleLocked takes the worker that went idle last, or nil.
func (d *dispatcher) popIdleLocked() *keyWorker {
	n := len(d.mu.idle)
	if n == 0 {
		return nil
	}
	w := d.mu.idle[n-1]
	d.mu.idle[n-1] = nil
	d.mu.idle = d.mu.idle[:n-1]
	return w
}

// nextKey returns, under the worker cap, the next pending key's first
// record; otherwise (or with none pending) it puts w back on the idle stack
// and returns nil.
func (d *dispatcher) nextKey(w *keyWorker) *job {
	d.mu.Lock()
	if j := d.mu.pending.pop(); j != nil {
		d.mu.Unlock()
		return j
	}
	d.mu.idle = append(d.mu.idle, w)
	d.mu.Unlock()
	if d.slots != nil {
		d.slots <- struct{}{} // never blocks: one token per worker
	}
	return nil
}

func (d *dispatcher) newQueueLocked() *keyQueue {
	if n := len(d.mu.freeQueues); n > 0 {
		q := d.mu.freeQueues[n-1]
		d.mu.freeQueues[n-1] = nil
		d.mu.freeQueues = d.mu.freeQueues[:n-1]
		return q
	}
	return new(keyQueue)
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
// returns once the stage loop is done dispatching and nothing is pending
// (stop closes next): a key-scoped stage still dispatches the records its
// gate releases while the partition drains.
func (d *dispatcher) worker(w *keyWorker, pc *Context) {
	for j := range w.next {
		for j != nil {
			d.runKey(j, pc)
			j = d.nextKey(w)
		}
	}
}

// runKey runs the records of j's key, j first, until the key's queue is
// empty; under the worker cap it holds a slot meanwhile.
func (d *dispatcher) runKey(j *job, pc *Context) {
	wc := d.s.p.c.workers
	ready := &j.q.ready
	if wc != nil {
		if !wc.acquire(d.workCtx, ready) {
			d.abandon(j) // the shutdown timeout
			return
		}
	}
	for j != nil {
		err := d.s.process(pc, &j.ev, j.stream, j.kh)
		if err != nil {
			d.s.p.fail(err)
		}
		j = d.finishKey(j, err != nil || d.workCtx.Err() != nil)
		if j != nil && wc != nil && !wc.yield(d.workCtx, ready) {
			d.abandon(j)
			return
		}
	}
	if wc != nil {
		wc.release()
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
	q, key := j.q, j.ev.Key
	d.mu.Lock()
	defer d.mu.Unlock()
	j.ev, j.next, j.q = Event{}, nil, nil
	d.mu.free = append(d.mu.free, j)
	if drop {
		for n := q.jobs.pop(); n != nil; n = q.jobs.pop() {
			n.ev.endSpan(OutcomeDropped, nil)
			o := n.ev.Offset
			n.ev, n.q = Event{}, nil
			d.mu.free = append(d.mu.free, n)
			d.s.drop(o)
		}
	}
	n := q.jobs.pop()
	if n == nil {
		d.s.p.c.workers.forget(&q.ready)
		delete(d.mu.keys, string(key))
		d.mu.freeQueues = append(d.mu.freeQueues, q)
		return nil
	}
	d.s.p.c.workers.shrink(&q.ready)
	return n
}

// stop tells the workers that nothing more is dispatched and waits for
// them. It is called once the stage loop returned. A worker returns only
// with its key's queue empty and, under the worker cap, nothing pending
// (pending is non-empty only while every worker is busy, and a busy
// worker takes from it before it goes idle), so nothing is left queued.
func (d *dispatcher) stop() {
	d.mu.Lock()
	workers := d.mu.workers
	d.mu.Unlock()
	for _, w := range workers {
		close(w.next)
	}
	d.wg.Wait()
}
