package chain

import (
	"context"
	"sort"
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
// Waiters can be many (up to the workers of every key-parallel stage of
// the chain, which start while the cap is full), and a slot changes hands
// once per key run. Every waiting key has at least its own record ready, so
// the waiter to serve is the earliest one (the queue's head) unless a key
// with two records or more waits: those keys — the ones with a queue, few
// where records do not wait — are kept in a list of their own, and a
// hand-over looks at the head and at them, not at every waiter.
type workerCap struct {
	mu   sync.Mutex
	free int
	seq  uint64
	// waiters[head:] are the waiting workers in arrival (seq) order.
	waiters []*capWaiter
	head    int
	// nwait is the number of waiters, written under mu: yield reads it
	// without mu, so that a worker with no one waiting (the common case
	// between two records of a key) takes no lock. A waiter that arrives
	// just after is served by the next yield or release.
	nwait atomic.Int32
	// long are the backlogs of two records or more, waiting or not (grow,
	// shrink and forget keep it); nlong is len(long), read by yield without
	// mu like nwait.
	long  []*backlog
	nlong atomic.Int32
	// spare recycles capWaiters and their channels (a worker may wait once
	// per key it takes); one per cap, since a channel belongs to the
	// synctest bubble, if any, that made it.
	spare sync.Pool
}

// backlog counts one key's records ready: the one a worker holds and those
// queued behind it. Its owner changes the count under its own lock,
// through start, grow, shrink and forget, which keep the cap's list of
// long backlogs; the cap reads the count without that lock.
type backlog struct {
	n atomic.Int32
	// Under the cap's mu: the key's worker while it waits for a slot, and
	// 1 + the backlog's index in the cap's long list (0: not in it).
	waiter *capWaiter
	at     int
}

// start sets b to one record, the first of a key that was not busy.
func (b *backlog) start() { b.n.Store(1) }

// grow counts one more record of b's key; c may be nil (no cap).
func (c *workerCap) grow(b *backlog) {
	if b.n.Add(1) == 2 && c != nil {
		c.mu.Lock()
		c.long = append(c.long, b)
		b.at = len(c.long)
		c.nlong.Store(int32(len(c.long)))
		c.mu.Unlock()
	}
}

// shrink counts one record fewer.
func (c *workerCap) shrink(b *backlog) {
	if b.n.Add(-1) == 1 && c != nil {
		c.dropLong(b)
	}
}

// forget retires b, whose key is no longer busy (its queue may have been
// dropped whole).
func (c *workerCap) forget(b *backlog) {
	if b.n.Swap(0) >= 2 && c != nil {
		c.dropLong(b)
	}
}

// dropLong takes b out of the long list: the last one takes its place.
func (c *workerCap) dropLong(b *backlog) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.at == 0 {
		return
	}
	i, last := b.at-1, len(c.long)-1
	c.long[i] = c.long[last]
	c.long[i].at = i + 1
	c.long[last] = nil
	c.long = c.long[:last]
	b.at = 0
	c.nlong.Store(int32(last))
}

type capWaiter struct {
	backlog *backlog
	seq     uint64
	granted chan struct{} // buffered 1
}

func newWorkerCap(n int) *workerCap { return &workerCap{free: n} }

// acquire takes a slot for a key whose backlog is b. It returns false,
// holding nothing, if ctx ends first.
func (c *workerCap) acquire(ctx context.Context, b *backlog) bool {
	c.mu.Lock()
	if c.free > 0 {
		c.free--
		c.mu.Unlock()
		return true
	}
	w := c.waitLocked(b)
	c.mu.Unlock()
	return c.await(ctx, w)
}

func (c *workerCap) waitLocked(b *backlog) *capWaiter {
	c.seq++
	w, _ := c.spare.Get().(*capWaiter)
	if w == nil {
		w = &capWaiter{granted: make(chan struct{}, 1)}
	}
	w.backlog, w.seq = b, c.seq
	b.waiter = w
	if c.head > 0 && c.head >= len(c.waiters)/2 {
		n := copy(c.waiters, c.waiters[c.head:])
		clear(c.waiters[n:])
		c.waiters, c.head = c.waiters[:n], 0
	}
	c.waiters = append(c.waiters, w)
	c.nwait.Store(int32(len(c.waiters) - c.head))
	return w
}

// removeLocked takes waiter i (an index into waiters) out of the queue,
// keeping the others' order.
func (c *workerCap) removeLocked(i int) {
	if w := c.waiters[i]; w.backlog.waiter == w {
		w.backlog.waiter = nil
	}
	if i == c.head {
		c.waiters[i] = nil
		c.head++
	} else {
		last := len(c.waiters) - 1
		copy(c.waiters[i:], c.waiters[i+1:])
		c.waiters[last] = nil
		c.waiters = c.waiters[:last]
	}
	if c.head == len(c.waiters) {
		c.waiters, c.head = c.waiters[:0], 0
	}
	c.nwait.Store(int32(len(c.waiters) - c.head))
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
	for i := c.head; i < len(c.waiters); i++ {
		if c.waiters[i] == w {
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
func (c *workerCap) yield(ctx context.Context, b *backlog) bool {
	// With no key at two records, no waiter's backlog exceeds b's (b
	// counts at least the record about to run).
	if c.nwait.Load() == 0 || c.nlong.Load() == 0 {
		return true
	}
	c.mu.Lock()
	i := c.topLocked()
	if i < 0 || c.waiters[i].backlog.n.Load() <= b.n.Load() {
		c.mu.Unlock()
		return true
	}
	top := c.waiters[i]
	c.removeLocked(i)
	w := c.waitLocked(b)
	c.mu.Unlock()
	top.granted <- struct{}{}
	return c.await(ctx, w)
}

// topLocked is the index of the waiter with the largest backlog, the
// earliest among equals; -1 if none waits. A waiter not in the long list
// has one record ready, as many as any other such waiter, and none of them
// came before the head.
func (c *workerCap) topLocked() int {
	if c.head == len(c.waiters) {
		return -1
	}
	top := c.waiters[c.head]
	best := top.backlog.n.Load()
	for _, b := range c.long {
		w := b.waiter
		if w == nil {
			continue
		}
		if n := b.n.Load(); n > best || n == best && w.seq < top.seq {
			top, best = w, n
		}
	}
	if top == c.waiters[c.head] {
		return c.head
	}
	// waiters is in seq order.
	q := c.waiters[c.head:]
	return c.head + sort.Search(len(q), func(i int) bool { return q[i].seq >= top.seq })
}
