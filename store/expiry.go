package store

import (
	"container/heap"
	"errors"
	"fmt"
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
type expiryIndex struct {
	h expiryHeap
	// cur is the persisted expiry of every persisted expiring entry: what
	// eviction would otherwise read from the backend to tell a current item
	// from a stale one.
	cur map[string]int64
}

// current returns the persisted expiry of key's entry; ok is false when
// the entry is absent or never expires.
func (x *expiryIndex) current(key string) (exp int64, ok bool) {
	exp, ok = x.cur[key]
	return exp, ok
}

// setCurrent records key's persisted value enc (nil: deleted).
func (x *expiryIndex) setCurrent(key string, enc []byte) {
	var exp int64
	if len(enc) >= expiryLen {
		exp = valueExpiry(enc)
	}
	x.setExpiry(key, exp)
}

// setExpiry records the persisted expiry of key's entry (0: deleted or
// never expires).
func (x *expiryIndex) setExpiry(key string, exp int64) {
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

type expiryHeap []expiryItem

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].exp != h[j].exp {
		return h[i].exp < h[j].exp
	}
	return h[i].key < h[j].key
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiryItem)) }
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old) - 1
	it := old[n]
	old[n] = expiryItem{}
	*h = old[:n]
	return it
}

// add indexes key as expiring at exp (exp >= 1).
func (x *expiryIndex) add(exp int64, key string) {
	heap.Push(&x.h, expiryItem{exp: exp, key: key})
}

// addAll indexes items at once: O(n) when the index was empty. The caller
// records the entries' current expiries (setCurrent) itself.
func (x *expiryIndex) addAll(items []expiryItem) {
	if len(x.h) == 0 {
		x.h = append(x.h, items...)
		heap.Init(&x.h)
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
	for n := 0; len(x.h) > 0 && x.h[0].exp <= ev; n++ {
		if n == limit {
			return dst, false
		}
		dst = append(dst, heap.Pop(&x.h).(expiryItem))
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

func (x *expiryIndex) len() int { return len(x.h) }

func (x *expiryIndex) reset() { x.h, x.cur = nil, nil }
