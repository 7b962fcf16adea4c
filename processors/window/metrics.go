package window

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"
)

// Stats is a snapshot of a Counter's metrics, over the partitions this
// process runs.
type Stats struct {
	// Counted is the number of records counted (repeated calls for one
	// record count once) since the Counter was created.
	Counted int64
	// Late is the number of Add calls for late records (not counted; a
	// retried call counts again).
	Late int64
	// Keys is the number of keys with live state: written by this process
	// since its partition was assigned, and not yet expired at the
	// partition's eviction watermark. Keys a partition's restored state
	// holds count once they are written again (each is, or expires, within
	// Window+Lateness of stream time).
	Keys int64
	// StateBytes is the size (state key + value) of those keys' entries.
	StateBytes int64
}

// Stats returns the counter's metrics.
func (c *Counter) Stats() Stats {
	s := Stats{Counted: c.m.counted.Load(), Late: c.m.late.Load()}
	c.m.parts.Range(func(_, v any) bool {
		k, b := v.(*tracker).totals()
		s.Keys += k
		s.StateBytes += b
		return true
	})
	return s
}

// RegisterMetrics registers the counter's metrics in r (e.g. the registry
// the chain and sarama report into) as gauges named
// "differential.window.<Name>.counted", ".late", ".keys" and
// ".state_bytes" (see Stats), and returns the function that unregisters
// them.
func (c *Counter) RegisterMetrics(r metrics.Registry) (unregister func()) {
	base := "differential.window." + c.cfg.Name + "."
	gauges := map[string]func() int64{
		"counted":     c.m.counted.Load,
		"late":        c.m.late.Load,
		"keys":        func() int64 { return c.Stats().Keys },
		"state_bytes": func() int64 { return c.Stats().StateBytes },
	}
	for n, f := range gauges {
		_ = r.Register(base+n, metrics.NewFunctionalGauge(f))
	}
	return func() {
		for n := range gauges {
			r.Unregister(base + n)
		}
	}
}

// meters are a Counter's metrics.
type meters struct {
	counted, late atomic.Int64
	// parts: partKey -> *tracker of the partition's current run.
	parts sync.Map
	mu    sync.Mutex // serialises tracker creation
}

type partKey struct {
	topic     string
	partition int32
}

// tracker returns the tracker of the partition run whose Process context is
// ctx, replacing the tracker of an earlier run. A tracker is removed when
// its context ends (the partition stopped).
func (m *meters) tracker(ctx context.Context, topic string, partition int32) *tracker {
	k, done := partKey{topic, partition}, ctx.Done()
	if v, ok := m.parts.Load(k); ok && v.(*tracker).done == done {
		return v.(*tracker)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.parts.Load(k); ok && v.(*tracker).done == done {
		return v.(*tracker)
	}
	tr := &tracker{done: done}
	tr.mu.minOff = math.MaxInt64
	tr.mu.through = math.MinInt64
	tr.mu.slots = map[int64]*slot{}
	m.parts.Store(k, tr)
	if done != nil {
		context.AfterFunc(ctx, func() { m.parts.CompareAndDelete(k, tr) })
	}
	return tr
}

// entryInfo describes one key's state entry before or after an Add.
type entryInfo struct {
	exists bool
	last   int64 // offset last counted
	exp    int64 // expiry, ns
	size   int   // key + value bytes
}

// tracker counts the live keys of one partition run by expiry, so that
// those expiring can be dropped when the eviction watermark passes them
// without visiting the keys: memory is bounded by the distinct expiries
// alive, at most (Window+Lateness)/Bucket + 1 plus the buckets between the
// eviction watermark and the stream time.
type tracker struct {
	done <-chan struct{}
	mu   struct {
		sync.Mutex
		// minOff is the smallest offset counted in this run. Every entry
		// written in this run has last ≥ minOff; every entry restored from
		// before it has last < minOff (it was persisted below the stage's
		// resume position, which no record of this run is below).
		minOff int64
		// through: entries expiring at or before it are evicted.
		through     int64
		slots       map[int64]*slot // by expiry
		exps        expiryHeap
		keys, bytes int64
	}
}

type slot struct{ keys, bytes int64 }

func (t *tracker) totals() (int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.keys, t.mu.bytes
}

// update moves a key from its previous entry's expiry to its new one, after
// dropping the entries that expired at the eviction watermark wm.
func (t *tracker) update(o int64, wm time.Time, prev, next entryInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.minOff = min(t.mu.minOff, o)
	if !wm.IsZero() {
		t.evictLocked(wm.UnixNano() - 1)
	}
	if prev.exists && prev.last >= t.mu.minOff {
		if s := t.mu.slots[prev.exp]; s != nil {
			s.keys--
			s.bytes -= int64(prev.size)
			t.mu.keys--
			t.mu.bytes -= int64(prev.size)
		}
	}
	if next.exists && next.exp > t.mu.through {
		s := t.mu.slots[next.exp]
		if s == nil {
			s = &slot{}
			t.mu.slots[next.exp] = s
			heap.Push(&t.mu.exps, next.exp)
		}
		s.keys++
		s.bytes += int64(next.size)
		t.mu.keys++
		t.mu.bytes += int64(next.size)
	}
}

// evict drops the entries that expired at the eviction watermark wm.
func (t *tracker) evict(wm time.Time) {
	if wm.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evictLocked(wm.UnixNano() - 1)
}

// evictLocked drops the slots expiring at or before through (the engine
// deletes those entries at its next checkpoint).
func (t *tracker) evictLocked(through int64) {
	if through <= t.mu.through {
		return
	}
	t.mu.through = through
	for len(t.mu.exps) > 0 && t.mu.exps[0] <= through {
		exp := heap.Pop(&t.mu.exps).(int64)
		s := t.mu.slots[exp]
		delete(t.mu.slots, exp)
		t.mu.keys -= s.keys
		t.mu.bytes -= s.bytes
	}
}

type expiryHeap []int64

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
