package store

import (
	"errors"
	"fmt"
	"maps"
)

// expiryIndex is a partition's index of its persisted expiring entries,
// in memory: (expiry, user key) pairs, the earliest expiry first. It is
// built from the entries when the partition is opened (each stored value
// starts with its expiry) and kept by the checkpoints, which hold the
// partition's checkpoint lock while they read or change it.
//
// Like a written-once index on disk it is never updated in place: a
// rewrite of a key with another expiry, or a deletion, leaves the old item
// behind, stale, and eviction tells by reading the entry when the item's
// time comes. Keeping it out of the backend halves the writes of a
// checkpoint (every expiring entry would otherwise cost an index key when
// written and a tombstone when evicted) and makes eviction's walk a heap
// pop instead of a range scan over those tombstones; the map of current
// expiries (cur) spares it a backend read per candidate. Its memory is
// about 80 bytes plus the user key per persisted expiring entry; items
// leave when their expiry passes evictBefore.
//
// A restore writes a partition's whole state in a few seconds: it records
// its batches' expiries (record, then keep once the batch is persisted) and
// the index takes them in at once (settle, which every other use of the
// index calls first): one map sized for all of them and one heap
// construction, where a map grown by doubling and a heap push per entry
// cost about half of a restore's CPU.
type expiryIndex struct {
	h expiryHeap
	// cur is the persisted expiry of every persisted expiring entry: what
	// eviction would otherwise read from the backend to tell a current item
	// from a stale one.
	cur map[string]int64
	// batch: the expiries of a batch being written, in write order (exp 0:
	// deleted or never expires); kept: those of persisted batches, not yet
	// in h and cur, in the order they were written.
	batch []expiryItem
	kept  [][]expiryItem
	// keptSets counts the items of kept that are writes (not deletions).
	keptSets int64
}

// current returns the persisted expiry of key's entry; ok is false when
// the entry is absent or never expires.
func (x *expiryIndex) current(key string) (exp int64, ok bool) {
	x.settle()
	exp, ok = x.cur[key]
	return exp, ok
}

// record notes the expiry of a key the batch being written writes (0:
// deleted or never expires), later items overriding earlier ones.
func (x *expiryIndex) record(it expiryItem) {
	x.batch = append(x.batch, it)
}

// drop forgets the recorded items of a batch that was not written.
func (x *expiryIndex) drop() {
	clear(x.batch)
	x.batch = x.batch[:0]
}

// keep marks the recorded items of the batch, sets of them writes, as
// persisted, for settle.
func (x *expiryIndex) keep(sets int) {
	x.keptSets += int64(sets)
	if len(x.batch) > 0 {
		x.kept = append(x.kept, x.batch)
		x.batch = make([]expiryItem, 0, cap(x.batch))
	}
}

// settle takes the kept expiries into cur and h.
func (x *expiryIndex) settle() {
	if len(x.kept) == 0 {
		return
	}
	n := 0
	for _, items := range x.kept {
		n += len(items)
	}
	if len(x.cur) < n {
		m := make(map[string]int64, len(x.cur)+n)
		maps.Copy(m, x.cur)
		x.cur = m
	}
	// A deleted or rewritten key's earlier items stay in the heap, stale,
	// as a checkpoint's do.
	live := make([]expiryItem, 0, n)
	for _, items := range x.kept {
		for _, it := range items {
			if it.exp == 0 {
				delete(x.cur, it.key)
				continue
			}
			x.cur[it.key] = it.exp
			live = append(live, it)
		}
	}
	x.kept, x.keptSets = nil, 0
	switch {
	case len(x.h) == 0:
		x.h = live
		x.h.init()
	case len(live) > len(x.h)/4:
		x.h = append(x.h, live...)
		x.h.init()
	default:
		for _, it := range live {
			x.h.push(it)
		}
	}
}

// setExpiry records the persisted expiry of key's entry (0: deleted or
// never expires).
func (x *expiryIndex) setExpiry(key string, exp int64) {
	x.settle()
	if exp == 0 {
		delete(x.cur, key)
		return
	}
	if x.cur == nil {
		x.cur = make(map[string]int64)
	}
	x.cur[key] = exp
}

type expiryItem struct {
	exp int64 // unix ns, >= 1
	key string
}

// expiryHeap is a min-heap of items, the earliest expiry (then the
// smallest key) at index 0. It is typed rather than a container/heap
// Interface: that one boxes every pushed and popped item into an any, an
// allocation per written and per evicted entry.
type expiryHeap []expiryItem

func (h expiryHeap) less(i, j int) bool {
	if h[i].exp != h[j].exp {
		return h[i].exp < h[j].exp
	}
	return h[i].key < h[j].key
}

// init establishes the heap order over the whole slice in O(n).
func (h expiryHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *expiryHeap) push(it expiryItem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

// pop removes and returns the earliest item; the heap must not be empty.
func (h *expiryHeap) pop() expiryItem {
	old := *h
	n := len(old) - 1
	it := old[0]
	old[0] = old[n]
	old[n] = expiryItem{} // drop the key for the collector
	*h = old[:n]
	h.down(0)
	return it
}

func (h expiryHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h expiryHeap) down(i int) {
	n := len(h)
	for {
		j := 2*i + 1 // left child
		if j >= n {
			return
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// add indexes key as expiring at exp (exp >= 1).
func (x *expiryIndex) add(exp int64, key string) {
	x.settle()
	x.h.push(expiryItem{exp: exp, key: key})
}

// addAll indexes items at once: O(n) when the index was empty. The caller
// records the entries' current expiries (setExpiry) itself.
func (x *expiryIndex) addAll(items []expiryItem) {
	x.settle()
	if len(x.h) == 0 {
		x.h = append(x.h, items...)
		x.h.init()
		return
	}
	for _, it := range items {
		x.add(it.exp, it.key)
	}
}

// popThrough removes and appends to dst the items with an expiry <= ev, at
// most limit of them (earliest first); complete is false when items <= ev
// remain.
func (x *expiryIndex) popThrough(dst []expiryItem, ev int64, limit int) (_ []expiryItem, complete bool) {
	x.settle()
	for n := 0; len(x.h) > 0 && x.h[0].exp <= ev; n++ {
		if n == limit {
			return dst, false
		}
		dst = append(dst, x.h.pop())
	}
	return dst, true
}

// buildExpiryIndex indexes the partition's persisted expiring entries
// (opening: nothing else uses the partition yet).
func (p *partitionStore) buildExpiryIndex() error {
	lo, hi := p.entryBounds()
	it, err := p.be.newIter(lo, hi)
	if err != nil {
		return err
	}
	var items []expiryItem
	for ok := it.seekGE(lo); ok; ok = it.next() {
		v := it.value()
		if len(v) < expiryLen {
			return errors.Join(fmt.Errorf("%w: entry %q has %d bytes", ErrCorrupt, it.key()[len(lo):], len(v)), it.close())
		}
		if exp := valueExpiry(v); exp != 0 {
			items = append(items, expiryItem{exp: exp, key: string(it.key()[len(lo):])})
		}
	}
	if err := errors.Join(it.err(), it.close()); err != nil {
		return err
	}
	p.ckpt.exp.reset()
	p.ckpt.exp.addAll(items)
	p.ckpt.exp.cur = make(map[string]int64, len(items))
	for _, it := range items {
		p.ckpt.exp.cur[it.key] = it.exp
	}
	return nil
}

func (x *expiryIndex) len() int {
	x.settle()
	return len(x.h)
}

func (x *expiryIndex) reset() {
	x.h, x.cur, x.batch, x.kept, x.keptSets = nil, nil, nil, nil, 0
}

// keptFilter is a filter of every key kept (written or deleted: a deleted
// key costs a false positive only).
func (x *expiryIndex) keptFilter() *keyFilter {
	n := 0
	for _, items := range x.kept {
		n += len(items)
	}
	f := newKeyFilter(int64(n))
	for _, items := range x.kept {
		for _, it := range items {
			f.addString(it.key)
		}
	}
	return f
}
