package store

import (
	"bytes"
	"strings"
	"sync"

	"github.com/RaduBerinde/btreemap"

	"github.com/differential-dev/differential/chain"
)

// Memory is a [chain.Store] whose persisted layer is a map: the same
// semantics as [DB] (same overlay, pending writes, checkpoint and eviction
// code), without durability across processes. For tests and the chaintest
// tester. Closing a partition and opening it again simulates a restart of
// that partition: pending writes are gone, checkpointed ones stay.
type Memory struct {
	engine
}

var _ chain.Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return newMemoryOn(newMemBackend())
}

func newMemoryOn(be *memBackend) *Memory {
	m := &Memory{}
	m.engine.init(be)
	return m
}

// Close closes every open partition (dropping their pending writes); later
// OpenPartition calls fail with ErrClosed. The persisted map is kept only as
// long as the Memory is referenced.
func (m *Memory) Close() error {
	return m.engine.close()
}

// memBackend is a backend over an ordered in-memory map (a B-tree, so that
// eviction's range scans cost what they do in Pebble, not a pass over
// everything). Batches apply under the write lock, so they are atomic for
// readers.
type memBackend struct {
	mu struct {
		sync.RWMutex
		t *btreemap.BTreeMap[string, []byte]
	}
}

func newMemBackend() *memBackend {
	be := &memBackend{}
	be.mu.t = btreemap.New[string, []byte](32, strings.Compare)
	return be
}

// get returns a copy: the stored slices are never modified, but the caller
// owns what it gets (as from Pebble).
func (be *memBackend) get(key []byte) ([]byte, bool, error) {
	be.mu.RLock()
	defer be.mu.RUnlock()
	_, v, ok := be.mu.t.Get(string(key))
	if !ok {
		return nil, false, nil
	}
	return bytes.Clone(v), true, nil
}

func (be *memBackend) getSorted(keys [][]byte, fn func(i int, value []byte)) error {
	be.mu.RLock()
	defer be.mu.RUnlock()
	for i, k := range keys {
		if _, v, ok := be.mu.t.Get(string(k)); ok {
			fn(i, v)
		}
	}
	return nil
}

// scan collects the matching keys under the read lock and calls fn outside
// it.
func (be *memBackend) scan(lo, hi []byte, fn func(key []byte) bool) error {
	be.mu.RLock()
	keys := be.rangeLocked(lo, hi)
	be.mu.RUnlock()
	for _, k := range keys {
		if !fn([]byte(k)) {
			break
		}
	}
	return nil
}

// rangeLocked returns the keys in [lo, hi), in order.
func (be *memBackend) rangeLocked(lo, hi []byte) []string {
	var keys []string
	for k := range be.mu.t.Ascend(btreemap.GE(string(lo)), btreemap.LT(string(hi))) {
		keys = append(keys, k)
	}
	return keys
}

func (be *memBackend) newBatch() batch { return &memBatch{be: be} }

// newIter returns an iterator that reads the live map: every positioning
// call takes the read lock and seeks from the current key, so it always
// sees the latest committed batches (refresh has nothing to do).
func (be *memBackend) newIter(lo, hi []byte) (backendIter, error) {
	it := &memIter{be: be, lo: string(lo), hi: string(hi)}
	it.take = it.takeKV
	return it, nil
}

type memIter struct {
	be     *memBackend
	lo, hi string
	k      string
	v      []byte
	ok     bool
	take   func(string, []byte) bool
}

func (it *memIter) takeKV(k string, v []byte) bool {
	it.k, it.v, it.ok = k, v, true
	return false
}

func (it *memIter) ascend(from btreemap.LowerBound[string]) bool {
	it.ok = false
	it.be.mu.RLock()
	it.be.mu.t.AscendFunc(from, btreemap.LT(it.hi), it.take)
	it.be.mu.RUnlock()
	return it.ok
}

func (it *memIter) descend(from btreemap.UpperBound[string]) bool {
	it.ok = false
	it.be.mu.RLock()
	it.be.mu.t.DescendFunc(from, btreemap.GE(it.lo), it.take)
	it.be.mu.RUnlock()
	return it.ok
}

func (it *memIter) seekGE(key []byte) bool {
	if k := string(key); k > it.lo {
		return it.ascend(btreemap.GE(k))
	}
	return it.ascend(btreemap.GE(it.lo))
}

func (it *memIter) seekLT(key []byte) bool {
	if k := string(key); k < it.hi {
		return it.descend(btreemap.LT(k))
	}
	return it.descend(btreemap.LT(it.hi))
}

func (it *memIter) setBounds(lo, hi []byte) { it.lo, it.hi, it.ok = string(lo), string(hi), false }

func (it *memIter) next() bool { return it.ascend(btreemap.GT(it.k)) }
func (it *memIter) prev() bool { return it.descend(btreemap.LT(it.k)) }

// key views the stored string without copying; it must not be modified.
func (it *memIter) key() []byte    { return unsafeBytes(it.k) }
func (it *memIter) value() []byte  { return it.v }
func (it *memIter) err() error     { return nil }
func (it *memIter) refresh() error { return nil }
func (it *memIter) close() error   { return nil }

func (be *memBackend) newBatchSized(int) batch { return be.newBatch() }

type memOpKind uint8

const (
	memSet memOpKind = iota
	memDel
	memDelRange
)

type memOp struct {
	kind memOpKind
	key  string
	val  []byte // memSet: value; memDelRange: end key
}

type memBatch struct {
	be  *memBackend
	ops []memOp
}

func (b *memBatch) set(key, value []byte) {
	v := make([]byte, len(value)) // non-nil even when empty
	copy(v, value)
	b.ops = append(b.ops, memOp{kind: memSet, key: string(key), val: v})
}

func (b *memBatch) del(key []byte) {
	b.ops = append(b.ops, memOp{kind: memDel, key: string(key)})
}

func (b *memBatch) delRange(lo, hi []byte) {
	b.ops = append(b.ops, memOp{kind: memDelRange, key: string(lo), val: bytes.Clone(hi)})
}

func (b *memBatch) commit() error {
	t := b.be
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, op := range b.ops {
		switch op.kind {
		case memSet:
			t.mu.t.ReplaceOrInsert(op.key, op.val)
		case memDel:
			t.mu.t.Delete(op.key)
		case memDelRange:
			for _, k := range t.rangeLocked([]byte(op.key), op.val) {
				t.mu.t.Delete(k)
			}
		}
	}
	b.ops = nil
	return nil
}

func (b *memBatch) commitNoSync() error { return b.commit() }

func (b *memBatch) discard() { b.ops = nil }

func (b *memBatch) size() int {
	n := 0
	for _, op := range b.ops {
		n += len(op.key) + len(op.val) + opOverhead
	}
	return n
}
