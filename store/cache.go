package store

import (
	"sync"
	"sync/atomic"

	"github.com/RaduBerinde/btreemap"
)

// The memory side of a partition's persisted state. A partition of a DB
// reads its persisted keys (entries, the expiry index, checkpoints, the
// changelog offset) from an in-memory copy of them, a mirror, instead of
// Pebble: a point read is a B-tree lookup, a range read a B-tree walk, and
// eviction walks the mirror's copy of the expiry index (keys ordered by
// expiry) and looks its candidates up in memory. Pebble still receives
// every checkpoint, as one batch (the coalesced last write of each key),
// and stays the durable copy; the mirror is applied after Pebble committed
// the same batch, under the mirror's write lock, so a reader sees a batch
// in the mirror entirely or not at all, exactly when it could in Pebble.
//
// The mirrors of a store share one memory budget (WithStateCacheBytes). A
// partition is mirrored when it is opened if its persisted keys fit in what
// is left of the budget; a mirror whose growth would pass the budget is
// dropped, and the partition reads Pebble from then on. Correctness never
// depends on the budget, only speed: a dropped mirror is frozen at the
// state of the last batch it applied, which Pebble holds too (the batch
// that would pass the budget is in Pebble before the mirror is dropped), so
// a reader still in the mirror reads what a Pebble iterator opened then
// would read, a snapshot; the generation bump of the checkpoint that
// dropped it makes range reads refresh their iterator, and a refreshed
// iterator of a dropped mirror reopens on Pebble (see scanner).

// entryOverhead approximates the memory a mirrored key costs beyond its
// key and value bytes (string and slice headers, its share of a B-tree
// node).
const entryOverhead = 64

// DefaultStateCacheBytes is the default memory budget of a DB's mirrors:
// none. Measured on `differential run` (changelog on, 300,000 records, two
// cores), a budget holding every partition cost more CPU a record than it
// saved (the second copy of every checkpoint batch and the collector's work
// on the mirrors' many small objects outweigh the cheaper reads) and 100–
// 200 MB more memory; read-heavy state (BenchmarkProcessorHistory's
// installs) gains from it.
const DefaultStateCacheBytes = 0

// cacheBudget is the budget the mirrors of one engine share.
type cacheBudget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes of the budget if they fit.
func (b *cacheBudget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *cacheBudget) release(n int64) { b.used.Add(-n) }

// mirrored is the backend of one partition of a DB: under (the engine's
// Pebble) behind a mirror of the partition's keys while the budget allows.
type mirrored struct {
	under  backend
	budget *cacheBudget
	mem    atomic.Pointer[memBackend] // nil: reads go to under
	// mu serialises apply and drop (batches of one partition commit one
	// at a time already; drop may come from Close); size is the mirror's
	// accounted bytes.
	mu   sync.Mutex
	size int64
}

// newMirrored loads the partition's keys in [lo, hi) from under into a
// mirror if they fit in the budget; otherwise the partition reads under.
func newMirrored(under backend, budget *cacheBudget, lo, hi []byte) (*mirrored, error) {
	m := &mirrored{under: under, budget: budget}
	if budget == nil || budget.limit <= 0 {
		return m, nil
	}
	mem := newMemBackend()
	it, err := under.newIter(lo, hi)
	if err != nil {
		return nil, err
	}
	var size int64
	fits := true
	for ok := it.seekGE(lo); ok; ok = it.next() {
		k, v := it.key(), it.value()
		if v == nil {
			if err := it.err(); err != nil {
				_ = it.close()
				return nil, err
			}
		}
		n := int64(len(k) + len(v) + entryOverhead)
		if !budget.reserve(n) {
			fits = false
			break
		}
		size += n
		mem.mu.t.ReplaceOrInsert(string(k), append(make([]byte, 0, len(v)), v...))
	}
	err = it.err()
	if cerr := it.close(); err == nil {
		err = cerr
	}
	if err != nil || !fits {
		budget.release(size)
		return m, err
	}
	m.size = size
	m.mem.Store(mem)
	return m, nil
}

// drop stops mirroring and gives the mirror's bytes back to the budget.
func (m *mirrored) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked()
}

func (m *mirrored) dropLocked() {
	if m.mem.Load() == nil {
		return
	}
	m.mem.Store(nil)
	m.budget.release(m.size)
	m.size = 0
}

// on reports whether the partition is mirrored (tests).
func (m *mirrored) on() bool { return m.mem.Load() != nil }

// get returns the mirror's value without copying it: stored values are
// never modified (a batch replaces them), and the store's callers do not
// modify what they get.
func (m *mirrored) get(key []byte) ([]byte, bool, error) {
	mem := m.mem.Load()
	if mem == nil {
		return m.under.get(key)
	}
	mem.mu.RLock()
	_, v, ok := mem.mu.t.Get(unsafeString(key))
	mem.mu.RUnlock()
	return v, ok, nil
}

func (m *mirrored) getSorted(keys [][]byte, fn func(i int, value []byte)) error {
	if mem := m.mem.Load(); mem != nil {
		return mem.getSorted(keys, fn)
	}
	return m.under.getSorted(keys, fn)
}

func (m *mirrored) scan(lo, hi []byte, fn func(key []byte) bool) error {
	if mem := m.mem.Load(); mem != nil {
		return mem.scan(lo, hi, fn)
	}
	return m.under.scan(lo, hi, fn)
}

func (m *mirrored) newIter(lo, hi []byte) (backendIter, error) {
	if mem := m.mem.Load(); mem != nil {
		it, _ := mem.newIter(lo, hi)
		return &mirrorIter{m: m, backendIter: it, mirror: true, lo: append([]byte(nil), lo...), hi: append([]byte(nil), hi...)}, nil
	}
	return m.under.newIter(lo, hi)
}

func (m *mirrored) newBatch() batch {
	return &mirrorBatch{m: m, b: m.under.newBatch()}
}

func (m *mirrored) newBatchSized(size int) batch {
	return &mirrorBatch{m: m, b: m.under.newBatchSized(size)}
}

// mirrorIter is an iterator of the mirror that moves to under when it is
// refreshed after the mirror was dropped.
type mirrorIter struct {
	m *mirrored
	backendIter
	mirror bool // backendIter is the mirror's
	lo, hi []byte
}

func (it *mirrorIter) setBounds(lo, hi []byte) {
	it.lo, it.hi = append(it.lo[:0], lo...), append(it.hi[:0], hi...)
	it.backendIter.setBounds(lo, hi)
}

func (it *mirrorIter) refresh() error {
	if !it.mirror || it.m.mem.Load() != nil {
		return it.backendIter.refresh()
	}
	ui, err := it.m.under.newIter(it.lo, it.hi)
	if err != nil {
		return err
	}
	_ = it.backendIter.close() // the mirror's: nothing to release
	it.backendIter, it.mirror = ui, false
	return nil
}

// mirrorBatch is a batch of under that the mirror applies once under
// committed it.
type mirrorBatch struct {
	m   *mirrored
	b   batch
	ops []memOp
}

func (b *mirrorBatch) mirroring() bool { return b.m.mem.Load() != nil }

func (b *mirrorBatch) set(key, value []byte) {
	b.b.set(key, value)
	if b.mirroring() {
		b.ops = append(b.ops, memOp{kind: memSet, key: string(key), val: append(make([]byte, 0, len(value)), value...)})
	}
}

func (b *mirrorBatch) del(key []byte) {
	b.b.del(key)
	if b.mirroring() {
		b.ops = append(b.ops, memOp{kind: memDel, key: string(key)})
	}
}

func (b *mirrorBatch) delRange(lo, hi []byte) {
	b.b.delRange(lo, hi)
	if b.mirroring() {
		b.ops = append(b.ops, memOp{kind: memDelRange, key: string(lo), val: append([]byte(nil), hi...)})
	}
}

func (b *mirrorBatch) size() int { return b.b.size() }

func (b *mirrorBatch) commit() error { return b.done(b.b.commit()) }

func (b *mirrorBatch) commitNoSync() error { return b.done(b.b.commitNoSync()) }

func (b *mirrorBatch) done(err error) error {
	if err == nil {
		b.m.apply(b.ops)
	}
	b.ops = nil
	return err
}

// applyRecorded adds a CheckpointAll part that under committed (in the
// group's batch) to the mirror.
func (m *mirrored) applyRecorded(ops []groupOp) {
	if m.mem.Load() == nil {
		return
	}
	mops := make([]memOp, len(ops))
	for i, op := range ops {
		mops[i] = memOp{kind: op.kind, key: string(op.key), val: op.val}
	}
	m.apply(mops)
}

func (b *mirrorBatch) discard() {
	b.b.discard()
	b.ops = nil
}

// apply adds a batch that under committed to the mirror, atomically for
// readers, or drops the mirror if it would pass the budget.
func (m *mirrored) apply(ops []memOp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := m.mem.Load()
	if mem == nil || len(ops) == 0 {
		return
	}
	// The growth is reserved before the mirror changes: a batch that does
	// not fit drops the mirror instead (under has it).
	var grow int64
	for _, op := range ops {
		if op.kind == memSet {
			grow += int64(len(op.key) + len(op.val) + entryOverhead)
		}
	}
	if !m.budget.reserve(grow) {
		m.dropLocked()
		return
	}
	var freed int64
	mem.mu.Lock()
	t := mem.mu.t
	for _, op := range ops {
		switch op.kind {
		case memSet:
			if k, v, ok := t.ReplaceOrInsert(op.key, op.val); ok {
				freed += int64(len(k) + len(v) + entryOverhead)
			}
		case memDel:
			if k, v, ok := t.Delete(op.key); ok {
				freed += int64(len(k) + len(v) + entryOverhead)
			}
		case memDelRange:
			for k, v := range t.Ascend(btreemap.GE(op.key), btreemap.LT(string(op.val))) {
				freed += int64(len(k) + len(v) + entryOverhead)
			}
			for _, k := range mem.rangeLocked([]byte(op.key), op.val) {
				t.Delete(k)
			}
		}
	}
	mem.mu.Unlock()
	m.size += grow - freed
	m.budget.release(freed)
}
