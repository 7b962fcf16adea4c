package chain

import (
	"runtime"
	"sync/atomic"
)

// published is a stage's checkpoint as its follower, the commit loop and
// Stats see it: a (position, watermark) pair that is read as one value.
//
// It is a sequence lock. The writer (complete, under the stage's mutex, so
// there is one at a time) makes seq odd, stores both fields, makes seq even
// again. A reader loads seq, both fields, and seq again, and keeps the pair
// only if seq was even and unchanged: then no store happened in between
// (every access is a sequentially consistent atomic, so a reader that saw a
// new field also sees the writer's first increment at its second load).
// Without it a reader could pair the position of one instant with the
// watermark of another — and a
// restored stage would then drop or admit records wrongly.
//
// Both fields only grow, so a reader that needs one of them alone (the
// eviction watermark, the idle check) may load it directly.
type published struct {
	seq  atomic.Uint64
	next atomic.Int64
	wm   atomic.Int64 // unix nanos; 0 = none
}

// store publishes (next, wm). Callers serialise (the stage's mutex).
func (c *published) store(next, wm int64) {
	c.seq.Add(1)
	c.next.Store(next)
	c.wm.Store(wm)
	c.seq.Add(1)
}

// load returns a pair that was published. A writer holds the sequence odd
// for two stores, so a reader rarely retries, and yields if it must.
func (c *published) load() (next, wm int64) {
	for spins := 0; ; spins++ {
		if s := c.seq.Load(); s&1 == 0 {
			next, wm = c.next.Load(), c.wm.Load()
			if c.seq.Load() == s {
				return next, wm
			}
		}
		if spins >= 4 {
			runtime.Gosched()
		}
	}
}
