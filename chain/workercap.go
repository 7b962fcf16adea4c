package chain

import (
	"context"
	"sync"
	"sync/atomic"
)

// workerCap is the chain-wide cap on records in processing
// (WithWorkerCap), shared by every partition's key-parallel stages. A
// worker holds a slot while it runs records of one key. When slots are
// short they go to the waiting worker whose key has the most records ready
// (ties: the earliest), and a worker whose key still has records ready
// keeps its slot unless a waiter's key has more: the keys with the longest
// backlog — a hot key's chain, which no design can run in parallel and
// which sets the run's critical path — are not queued behind the others'
// records, and a key with a short queue does not hold a slot through it
// while a longer one waits.
//
// Waiters are few (at most the workers of the chain's key-parallel stages)
// and scanned on each hand-over.
type workerCap struct {
	mu      sync.Mutex
	free    int
	seq     uint64
	waiters []*capWaiter
	// nwait is len(waiters), written under mu: yield reads it without mu,
	// so that a worker with no one waiting (the common case between two
	// records of a key) takes no lock. A waiter that arrives just after is
	// served by the next yield or release.
	nwait atomic.Int32
	// spare recycles capWaiters and their channels (a worker may wait once
	// per key it takes); one per cap, since a channel belongs to the
	// synctest bubble, if any, that made it.
	spare sync.Pool
}

type capWaiter struct {
	backlog *atomic.Int32 // the key's records ready (the one held + queued)
	seq     uint64
	granted chan struct{} // buffered 1
}

func newWorkerCap(n int) *workerCap { return &workerCap{free: n} }

// acquire takes a slot for a key whose backlog is counted by backlog. It
// returns false, holding nothing, if ctx ends first.
func (c *workerCap) acquire(ctx context.Context, backlog *atomic.Int32) bool {
	c.mu.Lock()
	if c.free > 0 {
		c.free--
		c.mu.Unlock()
		return true
	}
	w := c.waitLocked(backlog)
	c.mu.Unlock()
	return c.await(ctx, w)
}

func (c *workerCap) waitLocked(backlog *atomic.Int32) *capWaiter {
	c.seq++
	w, _ := c.spare.Get().(*capWaiter)
	if w == nil {
		w = &capWaiter{granted: make(chan struct{}, 1)}
	}
	w.backlog, w.seq = backlog, c.seq
	c.waiters = append(c.waiters, w)
	c.nwait.Store(int32(len(c.waiters)))
	return w
}

// removeLocked takes waiter i out of the queue: the last one takes its
// place (order is kept by seq, not by position).
func (c *workerCap) removeLocked(i int) {
	last := len(c.waiters) - 1
	c.waiters[i] = c.waiters[last]
	c.waiters[last] = nil
	c.waiters = c.waiters[:last]
	c.nwait.Store(int32(last))
}

// recycle returns a waiter whose grant, if any, was received.
func (c *workerCap) recycle(w *capWaiter) {
	w.backlog = nil
	c.spare.Put(w)
}

func (c *workerCap) await(ctx context.Context, w *capWaiter) bool {
	select {
	case <-w.granted:
		c.recycle(w)
		return true
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, x := range c.waiters {
		if x == w {
			c.removeLocked(i)
			c.mu.Unlock()
			c.recycle(w)
			return false
		}
	}
	c.mu.Unlock()
	<-w.granted // granted meanwhile: give it on
	c.recycle(w)
	c.release()
	return false
}

// release frees a slot: to the waiter with the largest backlog, if any.
func (c *workerCap) release() {
	c.mu.Lock()
	if i := c.topLocked(); i >= 0 {
		w := c.waiters[i]
		c.removeLocked(i)
		c.mu.Unlock()
		w.granted <- struct{}{}
		return
	}
	c.free++
	c.mu.Unlock()
}

// yield is called between two records of a key by the worker holding a
// slot for it: if a waiter's key has a larger backlog than this key's, the
// slot goes to it and the worker waits its turn. It returns false, holding
// nothing, if ctx ends meanwhile.
func (c *workerCap) yield(ctx context.Context, backlog *atomic.Int32) bool {
	if c.nwait.Load() == 0 {
		return true
	}
	c.mu.Lock()
	i := c.topLocked()
	if i < 0 || c.waiters[i].backlog.Load() <= backlog.Load() {
		c.mu.Unlock()
		return true
	}
	top := c.waiters[i]
	c.removeLocked(i)
	w := c.waitLocked(backlog)
	c.mu.Unlock()
	top.granted <- struct{}{}
	return c.await(ctx, w)
}

// topLocked is the index of the waiter with the largest backlog, the
// earliest (lowest seq) among equals; -1 if none waits. The waiters are in
// no order (removeLocked moves the last into the gap).
func (c *workerCap) topLocked() int {
	top := -1
	var best int32
	var bestSeq uint64
	for i, w := range c.waiters {
		if b := w.backlog.Load(); top < 0 || b > best || b == best && w.seq < bestSeq {
			top, best, bestSeq = i, b, w.seq
		}
	}
	return top
}
