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
	w := &capWaiter{backlog: backlog, seq: c.seq, granted: make(chan struct{}, 1)}
	c.waiters = append(c.waiters, w)
	return w
}

func (c *workerCap) await(ctx context.Context, w *capWaiter) bool {
	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			c.mu.Unlock()
			return false
		}
	}
	c.mu.Unlock()
	<-w.granted // granted meanwhile: give it on
	c.release()
	return false
}

// release frees a slot: to the waiter with the largest backlog, if any.
func (c *workerCap) release() {
	c.mu.Lock()
	if i := c.topLocked(); i >= 0 {
		w := c.waiters[i]
		c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
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
	c.mu.Lock()
	i := c.topLocked()
	if i < 0 || c.waiters[i].backlog.Load() <= backlog.Load() {
		c.mu.Unlock()
		return true
	}
	top := c.waiters[i]
	c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
	w := c.waitLocked(backlog)
	c.mu.Unlock()
	top.granted <- struct{}{}
	return c.await(ctx, w)
}

// topLocked is the index of the waiter with the largest backlog, the
// earliest among equals; -1 if none waits.
func (c *workerCap) topLocked() int {
	top := -1
	var best int32
	for i, w := range c.waiters {
		if b := w.backlog.Load(); top < 0 || b > best {
			top, best = i, b
		}
	}
	return top
}
