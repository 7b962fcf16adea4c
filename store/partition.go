package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RaduBerinde/btreemap"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// maxEvictionsPerCheckpoint bounds the persisted index entries one
// checkpoint examines for eviction, so that one batch stays bounded after a
// long pause; the rest are evicted by the following checkpoints.
const maxEvictionsPerCheckpoint = 100_000

// okey is the overlay entry of one user key: its latest write, pending or
// persisted, kept while any write to the key is pending.
type okey struct {
	key string // immutable
	// val is the latest write's value, nil for a delete, and exp its
	// expiry (expiryNanos). val is the slice the stage passed to Set,
	// which it does not modify afterwards (chain.State): Get returns it.
	val []byte
	exp int64
	// seq is the sequence number of the latest write.
	seq uint64
	// floor is the largest seq of a write to key persisted while this entry
	// existed. A pending write with seq < floor is superseded: a later write
	// to the key is already persisted, so persisting the older one would
	// move the key back in time. It is dropped, not written.
	floor uint64
	// pending counts the writes to key in the stages' pending lists. The
	// entry leaves the overlay when it drops to 0 and it has no history:
	// the backend then holds the key's latest write.
	pending int
	// hist is the key's history for reads as of a horizon (asof.go); nil
	// when no later stage may have to look past its latest write.
	hist *keyHist
}

// write is one pending Set (val != nil) or Delete of a stage.
type write struct {
	seq uint64
	off int64
	k   *okey
	val []byte
	exp int64
}

// partitionStore implements chain.PartitionStore over a backend.
//
// Lock order: ckpt before mu. mu guards the in-memory state and is held only
// for map and slice operations, never across backend I/O (except in Reset,
// which is rare). ckpt serialises Checkpoint, Checkpoints, Reset
// and Close, so that the backend's view of the partition changes only under
// it and the checkpointer's scratch needs no other lock.
type partitionStore struct {
	e          *engine
	be         backend
	ks         keyspace
	id         string // string(ks.prefix), the registry key
	topic      string
	partition  int32
	stages     []string
	handles    []stageState
	evictLimit int
	// betweenChunks, if set (tests), runs each time persisted releases mu
	// between two chunks.
	betweenChunks func()
	// filter holds every persisted key (see keyFilter); never nil once
	// the partition is open.
	filter atomic.Pointer[keyFilter]

	ckpt struct {
		sync.Mutex
		n       []int     // len of each pending list at the snapshot
		taken   [][]write // per stage: the writes this checkpoint persists
		flushed []write   // taken, merged in seq order
		kbuf    []byte
		vbuf    []byte // an entry's stored value, encoded for the batch
		cands   []string
		// lastWrite: index in flushed of each key's last write (evict
		// then marks the keys it decided).
		lastWrite map[string]int
		// exp indexes the persisted expiring entries by expiry (expiry.go).
		exp expiryIndex
		// sizeHint is the size of the batch the next checkpoint starts
		// with: a little more than the last one's, so that a busy
		// partition's batch (megabytes) is not grown by copying as it
		// fills.
		sizeHint int
		// private: the stages' Private prefixes (EvictPrivate, private.go).
		private []privateBound
	}

	mu struct {
		sync.Mutex
		closed  bool
		seq     uint64
		overlay map[string]*okey
		// keys holds the overlay's entries in key order, for scans (get
		// uses the map): those whose first byte is in ordered, and the
		// empty key. A first byte joins ordered when a range read first
		// covers it (orderLocked), so keys that are only ever read by Get —
		// a deduplication key per record — cost no ordered insert and
		// delete.
		keys    *btreemap.BTreeMap[string, *okey]
		ordered byteSet
		// gen counts the times overlay entries were dropped after their
		// writes were persisted (and Resets): a scan that sees it change
		// refreshes its backend iterator (see scanner).
		gen uint64
		// iters are backend iterators opened at the current gen and not in
		// use: a scan takes one instead of opening one (an iterator opened
		// at the current gen sees what a new one would; see scanner). A gen
		// change closes them.
		iters   []backendIter
		pending [][]write // per stage, in seq order (offsets in any order)
		// okeys is the rest of the block that new overlay entries are cut
		// from (newOkeyLocked).
		okeys []okey
		// hists holds the overlay entries that have a history (asof.go).
		hists map[string]*okey
		// noHist: KeepHistory(false); histGone: the keys whose persisted
		// history entries the next checkpoint deletes (noHist).
		noHist   bool
		histGone []string
	}
}

var _ chain.PartitionStore = (*partitionStore)(nil)

func newPartitionStore(e *engine, topic string, partition int32, stages []string) *partitionStore {
	ks := newKeyspace(topic, partition)
	p := &partitionStore{
		e:          e,
		be:         e.be,
		ks:         ks,
		id:         string(ks.prefix),
		topic:      topic,
		partition:  partition,
		stages:     append([]string(nil), stages...),
		evictLimit: maxEvictionsPerCheckpoint,
	}
	p.handles = make([]stageState, len(stages))
	for i := range p.handles {
		p.handles[i] = stageState{p: p, stage: i}
	}
	p.ckpt.n = make([]int, len(stages))
	p.ckpt.taken = make([][]write, len(stages))
	p.mu.overlay = make(map[string]*okey)
	p.mu.hists = make(map[string]*okey)
	p.mu.keys = btreemap.New[string, *okey](16, strings.Compare)
	p.mu.pending = make([][]write, len(stages))
	return p
}

func (p *partitionStore) err(op string, err error) error {
	return &Error{Topic: p.topic, Partition: p.partition, Op: op, Err: err}
}

// Stage returns the write handle of stage i. It panics if i is out of range.
func (p *partitionStore) Stage(i int) chain.StageState {
	if i < 0 || i >= len(p.handles) {
		panic(fmt.Sprintf("store: stage %d out of range [0,%d)", i, len(p.handles)))
	}
	return &p.handles[i]
}

// get is StageState.Get: the overlay, else the backend.
func (p *partitionStore) get(key []byte) ([]byte, bool, error) {
	if isHistKey(key) {
		return nil, false, nil // see histPrefix
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, false, p.err("get", ErrClosed)
	}
	k, ok := p.mu.overlay[string(key)]
	var val []byte
	if ok {
		val = k.val
	}
	p.mu.Unlock()
	if ok {
		if val == nil {
			return nil, false, nil
		}
		return val[:len(val):len(val)], true, nil
	}
	if !p.filter.Load().mayContain(key) {
		return nil, false, nil // never persisted
	}
	return p.getPersisted(key)
}

var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

func (p *partitionStore) getPersisted(key []byte) ([]byte, bool, error) {
	enc, ok, err := p.getPersistedEnc(key)
	if !ok || err != nil {
		return nil, false, err
	}
	return userValue(enc), true, nil
}

// getPersistedEnc is the stored value of key's persisted entry.
func (p *partitionStore) getPersistedEnc(key []byte) ([]byte, bool, error) {
	bp := keyBufs.Get().(*[]byte)
	*bp = entry((*bp)[:0], p.ks, key)
	enc, ok, err := p.be.get(*bp)
	keyBufs.Put(bp)
	if err != nil || !ok {
		if err != nil {
			err = p.err("get", err)
		}
		return nil, false, err
	}
	if len(enc) < expiryLen {
		return nil, false, p.err("get", fmt.Errorf("%w: entry %q has %d bytes", ErrCorrupt, key, len(enc)))
	}
	return enc, true, nil
}

// write records a pending write of stage (val nil for a delete, exp its
// expiry) and makes it the key's latest value in the overlay.
func (p *partitionStore) write(op string, stage int, off int64, key, val []byte, exp int64) error {
	if isHistKey(key) {
		return p.err(op, fmt.Errorf("%w: user keys must not start with %q", ErrInvalid, histPrefix))
	}
	// A write that starts a history needs the key's value before it: a
	// persisted one is read before mu is taken (no I/O under mu), and
	// used if no checkpoint changed the backend meanwhile.
	var base []byte
	var baseExp int64
	var baseGen uint64
	baseRead, hist := false, false
	var k *okey
	for {
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			return p.err(op, ErrClosed)
		}
		k = p.mu.overlay[string(key)]
		hist = !p.mu.noHist && stage < len(p.stages)-1
		if !hist || k != nil {
			break
		}
		if !p.filter.Load().mayContain(key) {
			base, baseExp = nil, 0 // never persisted
			break
		}
		if baseRead && baseGen == p.mu.gen {
			break
		}
		baseGen = p.mu.gen
		p.mu.Unlock()
		enc, ok, err := p.getPersistedEnc(key)
		if err != nil {
			return err
		}
		base, baseExp, baseRead = nil, 0, true
		if ok {
			base, baseExp = userValue(enc), valueExpiry(enc)
		}
	}
	defer p.mu.Unlock()
	if k == nil {
		k = p.newOkeyLocked(string(key))
		p.mu.overlay[k.key] = k
		if p.mu.ordered.holds(k.key) {
			p.mu.keys.ReplaceOrInsert(k.key, k)
		}
	} else {
		base, baseExp = k.val, k.exp
	}
	if hist || k.hist != nil {
		p.addVersionLocked(k, stage, off, val, exp, base, baseExp)
	}
	p.mu.seq++
	k.val, k.exp, k.seq = val, exp, p.mu.seq
	k.pending++
	p.mu.pending[stage] = append(p.mu.pending[stage], write{seq: p.mu.seq, off: off, k: k, val: val, exp: exp})
	return nil
}

// orderLocked makes the overlay's ordered keys hold every overlay key a
// range read of [lo, hi) (no upper bound without hasHi) may pass: each first
// byte such a key can have that is not ordered yet joins ordered, and the
// overlay's keys with it are inserted, in one pass over the overlay. It may
// order more bytes than the range needs, never fewer.
func (p *partitionStore) orderLocked(lo, hi string, hasHi bool) {
	first, last := 0, 255
	if lo != "" {
		first = int(lo[0])
	}
	if hasHi {
		if hi == "" {
			return // an empty range
		}
		last = int(hi[0])
	}
	add := byteRange(byte(first), byte(last)).without(p.mu.ordered)
	if add.empty() {
		return
	}
	for key, k := range p.mu.overlay {
		if key != "" && add.has(key[0]) {
			p.mu.keys.ReplaceOrInsert(key, k)
		}
	}
	p.mu.ordered.union(add)
}

// byteSet is a set of bytes.
type byteSet [4]uint64

// byteRange returns the set of the bytes from first to last (first <= last),
// word by word: a range read checks its bytes in constant time.
func byteRange(first, last byte) byteSet {
	var r byteSet
	for w := range r {
		lo, hi := w*64, w*64+63
		if int(last) < lo || int(first) > hi {
			continue
		}
		from, to := max(int(first), lo)-lo, min(int(last), hi)-lo
		r[w] = (^uint64(0) >> (63 - to)) &^ (1<<from - 1)
	}
	return r
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) empty() bool     { return s[0]|s[1]|s[2]|s[3] == 0 }
func (s byteSet) without(o byteSet) byteSet {
	return byteSet{s[0] &^ o[0], s[1] &^ o[1], s[2] &^ o[2], s[3] &^ o[3]}
}
func (s *byteSet) union(o byteSet) {
	s[0], s[1], s[2], s[3] = s[0]|o[0], s[1]|o[1], s[2]|o[2], s[3]|o[3]
}

// holds reports whether the ordered keys hold key when it is in the
// overlay: the empty key always, any other by its first byte.
func (s *byteSet) holds(key string) bool { return key == "" || s.has(key[0]) }

// okeyBlock is how many overlay entries are allocated together.
const okeyBlock = 64

// newOkeyLocked returns a new overlay entry for key. A write to a key not in
// the overlay is the store's most frequent allocation, so entries are cut
// from blocks allocated okeyBlock at a time. A block stays reachable while
// any of its entries is; an entry that leaves the overlay drops its value
// (persisted), so that a block kept by one hot key holds no other values.
func (p *partitionStore) newOkeyLocked(key string) *okey {
	if len(p.mu.okeys) == 0 {
		p.mu.okeys = make([]okey, okeyBlock)
	}
	k := &p.mu.okeys[0]
	p.mu.okeys = p.mu.okeys[1:]
	k.key = key
	return k
}

// Checkpoint persists, in one synced batch, every stage's pending writes
// below its Next or in its Above (in the order they were made), the eviction of expired
// entries and every stage's checkpoint. See doc.go. The state is then no
// longer the image of a changelog, so the batch drops the changelog offset.
func (p *partitionStore) Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error {
	pc, err := p.prepare(cps, evictBefore, false)
	if err != nil {
		return err
	}
	return pc.commit(noChangelog)
}

// prepare builds the batch of a checkpoint (and, with records, its changelog
// records) and returns it holding ckpt: commit or abort releases it.
func (p *partitionStore) prepare(cps []commit.Checkpoint, evictBefore time.Time, records bool) (*prepared, error) {
	return p.prepareIn(cps, evictBefore, records, func() batch { return p.be.newBatchSized(p.ckpt.sizeHint) })
}

// prepareIn is prepare building the checkpoint in the batch newBatch
// returns (CheckpointAll's recording batch, or the backend's own).
func (p *partitionStore) prepareIn(cps []commit.Checkpoint, evictBefore time.Time, records bool, newBatch func() batch) (*prepared, error) {
	if err := p.checkCheckpoints(cps); err != nil {
		return nil, p.err("checkpoint", err)
	}
	p.ckpt.Lock()
	pc := &prepared{p: p, cps: cps, withRecords: records}
	if err := p.rebuildFilterIfFull(); err != nil {
		pc.release()
		return nil, p.err("checkpoint", err)
	}

	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		pc.release()
		return nil, p.err("checkpoint", ErrClosed)
	}
	p.takeLocked(cps)
	p.mu.Unlock()

	p.ckpt.flushed = mergeBySeq(p.ckpt.flushed[:0], p.ckpt.taken)
	pc.b = newBatch()
	pc.ev = expiryNanos(evictBefore)
	p.setPrivateBounds(cps, pc.ev)
	p.writeFlushed(pc.b, p.ckpt.flushed, pc)
	evicted, complete, err := p.evict(pc, p.ckpt.flushed)
	if err != nil {
		pc.abort()
		return nil, p.err("checkpoint", err)
	}
	pc.evicted, pc.complete = evicted, complete
	if records {
		for _, key := range pc.evicted {
			pc.addRecord(key, nil)
		}
	}
	p.histWrites(pc)
	for i, cp := range cps {
		p.ckpt.kbuf = checkpointKey(p.ckpt.kbuf[:0], p.ks, p.stages[i])
		pc.b.set(p.ckpt.kbuf, encodeCheckpoint(cp))
	}
	p.ckpt.sizeHint = pc.b.size() + pc.b.size()/4
	return pc, nil
}

// commit writes the prepared batch with the changelog offset (noChangelog:
// the offset is deleted) and updates the in-memory state; it releases ckpt.
//
// With a changelog offset the batch is not synced: the changelog holds the
// state durably (its records were acknowledged before this commit), the
// batch records which prefix of it the local entries are, and Pebble
// persists batches atomically and in order, so a machine crash leaves the
// local state at an earlier checkpoint that says where it is, and the
// restore catches it up from the changelog. Without a changelog the local
// store is the only copy of the state, and the batch is synced.
func (pc *prepared) commit(changelogOffset int64) error {
	defer pc.release()
	pc.seal(changelogOffset)
	write := pc.b.commit
	if changelogOffset != noChangelog {
		write = pc.b.commitNoSync
	}
	if err := write(); err != nil {
		// Nothing was applied and nothing was removed from the pending
		// lists: a retry persists the same writes.
		return pc.p.err("checkpoint", err)
	}
	pc.applied()
	return nil
}

// seal adds the changelog offset (noChangelog: its deletion) to the batch.
func (pc *prepared) seal(changelogOffset int64) {
	p := pc.p
	kb := changelogKey(p.ckpt.kbuf[:0], p.ks)
	if changelogOffset == noChangelog {
		pc.b.del(kb)
	} else {
		pc.b.set(kb, encodeChangelogOffset(changelogOffset))
	}
	p.ckpt.kbuf = kb
}

// applied updates the in-memory state once the batch is persisted.
func (pc *prepared) applied() {
	p := pc.p
	pc.indexed = true
	p.ckpt.exp.addAll(pc.added)
	for _, w := range p.ckpt.flushed {
		p.ckpt.exp.setExpiry(w.k.key, w.exp) // a delete's exp is 0
	}
	for _, key := range pc.evicted {
		p.ckpt.exp.setExpiry(key, 0)
	}
	for _, key := range pc.vanished {
		p.ckpt.exp.setExpiry(key, 0)
	}
	// The generation moves before any key leaves the overlay, so that a scan
	// that reads the overlay after a key left it reopens its backend
	// iterator (see scanner); then the persisted writes leave in chunks.
	p.mu.Lock()
	stale := p.newGenLocked()
	p.mu.Unlock()
	closeIters(stale)
	p.persisted(pc.cps, pc.hists, pc.histGone, pc.evicted, pc.vanished)
}

// newGenLocked bumps the generation (the backend changed under keys that
// leave or left the overlay) and returns the cached iterators, now stale,
// for the caller to close outside mu.
func (p *partitionStore) newGenLocked() []backendIter {
	p.mu.gen++
	stale := p.mu.iters
	p.mu.iters = nil
	return stale
}

func closeIters(its []backendIter) {
	for _, it := range its {
		_ = it.close() // read-only: nothing to lose
	}
}

func (p *partitionStore) checkCheckpoints(cps []commit.Checkpoint) error {
	if len(cps) != len(p.stages) {
		return fmt.Errorf("%w: %d checkpoints for %d stages", ErrInvalid, len(cps), len(p.stages))
	}
	for i, cp := range cps {
		if cp.Stage != "" && cp.Stage != p.stages[i] {
			return fmt.Errorf("%w: checkpoint %d is for stage %q, want %q", ErrInvalid, i, cp.Stage, p.stages[i])
		}
		prev := cp.Next - 1
		for _, o := range cp.Above {
			if o <= prev {
				return fmt.Errorf("%w: checkpoint %d: offsets completed above %d not increasing from it: %v", ErrInvalid, i, cp.Next, cp.Above)
			}
			prev = o
		}
	}
	return nil
}

// covers reports whether a checkpoint persists the writes of the record at
// off: below the stage's Next or completed above it (Above, carried with
// it).
func covers(cp *commit.Checkpoint, off int64) bool {
	if off < cp.Next {
		return true
	}
	_, found := slices.BinarySearch(cp.Above, off)
	return found
}

// takeLocked copies into ckpt.taken, per stage, the pending writes that this
// checkpoint persists: offset below the stage's Next or in its Above, and
// not superseded. It
// leaves the pending lists alone; persisted removes the writes once
// the batch has committed.
func (p *partitionStore) takeLocked(cps []commit.Checkpoint) {
	for i, l := range p.mu.pending {
		p.ckpt.n[i] = len(l)
		cp := &cps[i]
		taken := p.ckpt.taken[i][:0]
		for _, w := range l {
			if covers(cp, w.off) && w.seq > w.k.floor {
				taken = append(taken, w)
			}
		}
		p.ckpt.taken[i] = taken
	}
}

// mergeBySeq appends the writes of lists (each in seq order) to dst in seq
// order: the order they were made in, across stages.
func mergeBySeq(dst []write, lists [][]write) []write {
	idx := make([]int, len(lists)) // next write of each list
	for {
		best := -1
		for i, l := range lists {
			if idx[i] < len(l) && (best < 0 || l[idx[i]].seq < lists[best][idx[best]].seq) {
				best = i
			}
		}
		if best < 0 {
			return dst
		}
		dst = append(dst, lists[best][idx[best]])
		idx[best]++
	}
}

// writeFlushed adds the writes to b: the entry (or its deletion); an
// expiring entry that outlives this checkpoint's eviction goes into
// pc.added, for the expiry index once the batch is persisted. An entry's
// eviction bound is the checkpoint's, or its owner stage's for a key under
// a stage's Private prefix (evictionBound).
//
// Only the last write of each key goes into the batch: the earlier ones are
// superseded within the same atomic batch, and a hot key (a busy user's click
// list) can be rewritten thousands of times between two checkpoints.
func (p *partitionStore) writeFlushed(b batch, flushed []write, pc *prepared) {
	kb, vb := p.ckpt.kbuf, p.ckpt.vbuf
	if p.ckpt.lastWrite == nil {
		p.ckpt.lastWrite = make(map[string]int)
	}
	last := p.ckpt.lastWrite
	clear(last)
	for i, w := range flushed {
		last[w.k.key] = i
	}
	f := p.filter.Load()
	for i, w := range flushed {
		if last[w.k.key] != i {
			continue
		}
		kb = entry(kb[:0], p.ks, w.k.key)
		if w.val != nil && expiresBy(w.exp, p.evictionBound(w.k.key, pc.ev)) {
			// This batch's eviction would delete what it writes: the
			// entry is not written. A key with a persisted entry (the
			// filter holds every one) is deleted, as eviction would; one
			// without costs nothing — on a backlog, where event time runs
			// ahead of the interval, most short-lived entries are born
			// and expire between two checkpoints.
			last[w.k.key] = -1 // decided: eviction skips it
			if f.mayContain(unsafeBytes(w.k.key)) {
				b.del(kb)
				pc.evicted = append(pc.evicted, w.k.key)
			} else {
				pc.vanished = append(pc.vanished, w.k.key)
			}
			continue
		}
		if w.val == nil {
			if pc.withRecords {
				pc.addRecord(w.k.key, nil)
			}
			b.del(kb)
			continue
		}
		// Every batch copies what it is given, so one buffer serves every
		// entry.
		vb = appendValue(vb[:0], w.exp, w.val)
		if pc.withRecords {
			pc.addRecord(w.k.key, vb)
		}
		b.set(kb, vb)
		f.add(unsafeBytes(w.k.key)) // before the overlay drops it
		if w.exp != 0 && w.exp > pc.ev {
			pc.added = append(pc.added, expiryItem{exp: w.exp, key: w.k.key})
		}
	}
	p.ckpt.kbuf, p.ckpt.vbuf = kb, vb
}

// evict adds to pc.b the deletion of every entry whose expiry is in
// [1, pc.ev], judged on the state after this batch's writes: the persisted
// ones the expiry index holds (it takes them out; an item whose key was
// since deleted or rewritten with another expiry is stale and only
// dropped) and those of this batch's writes. It returns the user keys whose
// entries it deletes, and complete=false if evictLimit left index items of
// an expiry <= pc.ev for the next checkpoint.
func (p *partitionStore) evict(pc *prepared, flushed []write) (evicted []string, complete bool, err error) {
	ev, b := pc.ev, pc.b
	evicted = pc.evicted // writeFlushed's
	if ev == 0 {
		return evicted, true, nil
	}
	cands := p.ckpt.cands[:0]
	pc.popped, complete = p.ckpt.exp.popThrough(pc.popped[:0], ev, p.evictLimit)
	for _, it := range pc.popped {
		cands = append(cands, it.key)
	}
	kb := p.ckpt.kbuf
	p.ckpt.cands = cands
	if len(cands) == 0 {
		p.ckpt.kbuf = kb
		return evicted, complete, nil
	}

	// The last write of each key in this batch decides its state after it
	// (writeFlushed left the index of each key's last write in lastWrite;
	// this marks the keys decided with -1); the expiry index knows the
	// persisted expiry of the others.
	last := p.ckpt.lastWrite
	for _, key := range cands {
		i, inBatch := last[key]
		if i < 0 {
			continue // already decided
		}
		last[key] = -1
		var expired bool
		if inBatch {
			expired = flushed[i].val != nil && expiresBy(flushed[i].exp, ev)
		} else {
			exp, ok := p.ckpt.exp.current(key)
			expired = ok && exp <= ev
		}
		if expired {
			kb = entry(kb[:0], p.ks, key)
			b.del(kb)
			evicted = append(evicted, key)
		}
	}
	p.ckpt.kbuf = kb
	return evicted, complete, nil
}

// expiresBy reports whether exp is an expiry in [1, ev].
func expiresBy(exp, ev int64) bool { return exp != 0 && exp <= ev }

// persisted updates the in-memory state after a committed checkpoint (and
// after the generation moved):
// the persisted (or superseded) writes leave the pending lists, overlay
// entries without pending writes leave the overlay, and an evicted key whose
// latest write was persisted reads as deleted.
func (p *partitionStore) persisted(cps []commit.Checkpoint, hists []histUpdate, histGone int, gone ...[]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The keys leave the overlay in chunks, mu released between them: a
	// checkpoint at a long interval persists tens of thousands of writes,
	// and the stage workers of the partition, which take mu for every read
	// and write, would otherwise stand still for all of them. Between two
	// chunks a key still in the overlay has its persisted value, and
	// writes only append to the pending lists (a list's first n writes,
	// the checkpoint's, stay where they are).
	left := persistChunk
	for i := range p.mu.pending {
		n, cp := p.ckpt.n[i], &cps[i]
		for x := range n {
			w := p.mu.pending[i][x]
			if !covers(cp, w.off) {
				continue
			}
			k := w.k
			k.floor = max(k.floor, w.seq)
			if k.pending--; k.pending == 0 && k.hist == nil {
				delete(p.mu.overlay, k.key)
				if p.mu.ordered.holds(k.key) {
					p.mu.keys.Delete(k.key)
				}
				k.val = nil // see newOkeyLocked
			}
			if left--; left == 0 {
				p.mu.Unlock()
				left = persistChunk
				if p.betweenChunks != nil {
					p.betweenChunks()
				}
				p.mu.Lock()
			}
		}
	}
	for i, l := range p.mu.pending {
		n, cp := p.ckpt.n[i], &cps[i]
		j := 0
		for _, w := range l[:n] {
			if !covers(cp, w.off) {
				l[j] = w
				j++
			}
		}
		j += copy(l[j:], l[n:])
		clear(l[j:])
		p.mu.pending[i] = l[:j]
	}
	for _, keys := range gone {
		for _, key := range keys {
			if k := p.mu.overlay[key]; k != nil && k.seq <= k.floor {
				k.val, k.exp = nil, 0
			}
		}
	}
	p.histsAppliedLocked(cps, hists, histGone, gone)
}

// persistChunk is how many persisted writes leave the overlay under one
// hold of mu.
const persistChunk = 256

// clearScratch drops the scratch's references to writes and keys, so that a
// checkpoint does not keep memory alive until the next one.
func (p *partitionStore) clearScratch() {
	for i, t := range p.ckpt.taken {
		clear(t)
		p.ckpt.taken[i] = t[:0]
	}
	clear(p.ckpt.flushed)
	p.ckpt.flushed = p.ckpt.flushed[:0]
	clear(p.ckpt.cands)
	p.ckpt.cands = p.ckpt.cands[:0]
	clear(p.ckpt.lastWrite)
}

// Checkpoints returns the persisted checkpoints in stage order. ok is false
// when any stage has none: nothing was ever checkpointed, or the stages
// differ from those of the persisted state (a stage was added or renamed),
// in which case the caller should Reset. Checkpoints of stages not in the
// list are ignored (they stay until Reset).
func (p *partitionStore) Checkpoints() ([]commit.Checkpoint, bool, error) {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return nil, false, p.err("checkpoints", ErrClosed)
	}
	return p.checkpointsLocked()
}

// checkpointsLocked is Checkpoints with ckpt held (or the partition not yet
// shared).
func (p *partitionStore) checkpointsLocked() ([]commit.Checkpoint, bool, error) {
	cps := make([]commit.Checkpoint, len(p.stages))
	for i, s := range p.stages {
		p.ckpt.kbuf = checkpointKey(p.ckpt.kbuf[:0], p.ks, s)
		v, ok, err := p.be.get(p.ckpt.kbuf)
		if err != nil {
			return nil, false, p.err("checkpoints", err)
		}
		if !ok {
			return nil, false, nil
		}
		if cps[i], err = decodeCheckpoint(s, v); err != nil {
			return nil, false, p.err("checkpoints", err)
		}
	}
	return cps, true, nil
}

func (p *partitionStore) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.closed
}

// Reset deletes every persisted key of the partition with one synced range
// deletion, and every pending write. It holds mu across the I/O: it is rare
// and no reader may see the overlay cleared before the backend is.
func (p *partitionStore) Reset() error {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return p.err("reset", ErrClosed)
	}
	b := p.be.newBatch()
	b.delRange(p.ks.prefix, p.ks.end())
	if err := b.commit(); err != nil {
		return p.err("reset", err)
	}
	p.filter.Store(newKeyFilter(0))
	p.ckpt.exp.reset()
	p.dropLocked()
	return nil
}

// Close drops the pending writes and the overlay; persisted state stays.
// It waits for a checkpoint in progress. Closing twice is a no-op.
func (p *partitionStore) Close() error {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	p.mu.Lock()
	closed := p.mu.closed
	p.mu.closed = true
	p.dropLocked()
	p.mu.Unlock()
	if !closed {
		if m, ok := p.be.(*mirrored); ok {
			m.drop()
		}
		p.e.unregister(p)
	}
	return nil
}

func (p *partitionStore) dropLocked() {
	clear(p.mu.overlay)
	clear(p.mu.hists)
	p.mu.histGone = nil
	p.mu.keys.Clear(false)
	closeIters(p.newGenLocked()) // rare: closing under mu is fine
	for i := range p.mu.pending {
		p.mu.pending[i] = nil
	}
}

// encodeCheckpoint: <version 1><next be64><watermark be64>; with offsets
// completed at or above next, <version 2><next><watermark> then each offset
// as a uvarint of its distance from the previous one (from next − 1 for the
// first).
// The stage name is in the key.
func encodeCheckpoint(cp commit.Checkpoint) []byte {
	v := make([]byte, 0, checkpointLen+2*len(cp.Above))
	if len(cp.Above) == 0 {
		v = append(v, checkpointVersion)
	} else {
		v = append(v, checkpointVersionAbove)
	}
	v = binary.BigEndian.AppendUint64(v, uint64(cp.Next))
	v = binary.BigEndian.AppendUint64(v, uint64(cp.Watermark))
	prev := cp.Next - 1
	for _, o := range cp.Above {
		v = binary.AppendUvarint(v, uint64(o-prev))
		prev = o
	}
	return v
}

func decodeCheckpoint(stage string, v []byte) (commit.Checkpoint, error) {
	bad := func() (commit.Checkpoint, error) {
		return commit.Checkpoint{}, fmt.Errorf("%w: checkpoint of stage %q: %x", ErrCorrupt, stage, v)
	}
	if len(v) < checkpointLen || (v[0] != checkpointVersion && v[0] != checkpointVersionAbove) ||
		(v[0] == checkpointVersion) != (len(v) == checkpointLen) {
		return bad()
	}
	cp := commit.Checkpoint{
		Stage:     stage,
		Next:      int64(binary.BigEndian.Uint64(v[1:])),
		Watermark: int64(binary.BigEndian.Uint64(v[9:])),
	}
	prev := cp.Next - 1
	for rest := v[checkpointLen:]; len(rest) > 0; {
		d, n := binary.Uvarint(rest)
		if n <= 0 || d == 0 || d > uint64(math.MaxInt64-prev) {
			return bad()
		}
		prev += int64(d)
		cp.Above = append(cp.Above, prev)
		rest = rest[n:]
	}
	return cp, nil
}

// stageState is the chain.StageState of one stage.
type stageState struct {
	p     *partitionStore
	stage int
}

var _ chain.StageState = (*stageState)(nil)

// Get returns the latest value of key written by any stage, pending or
// persisted. The returned slice is shared with the store: do not modify it.
func (s *stageState) Get(key []byte) ([]byte, bool, error) { return s.p.get(key) }

// Set writes key for the record at offset; expires zero means never.
func (s *stageState) Set(offset int64, key, value []byte, expires time.Time) error {
	if value == nil {
		value = []byte{} // nil is a delete's; an empty value allocates nothing
	}
	return s.p.write("set", s.stage, offset, key, value, expiryNanos(expires))
}

// Delete deletes key for the record at offset.
func (s *stageState) Delete(offset int64, key []byte) error {
	return s.p.write("delete", s.stage, offset, key, nil, 0)
}

// Scan calls fn with every entry whose key is in [lo, hi) (hi nil: no upper
// bound), in ascending key order, until fn returns false. It sees what Get
// sees. key and value are valid only during the call and must not be
// modified; lo and hi must not change during the scan. fn may call the
// state; whether the scan sees writes made after it began is unspecified.
func (s *stageState) Scan(lo, hi []byte, fn func(key, value []byte) bool) error {
	return s.p.scan(lo, hi, false, fn)
}

// ScanReverse is Scan in descending key order.
func (s *stageState) ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error {
	return s.p.scan(lo, hi, true, fn)
}

// GetAsOf is Get as of horizon h: see chain.StageState.
func (s *stageState) GetAsOf(h int64, key []byte) ([]byte, bool, error) {
	return s.p.getAsOf(s.stage, h, key)
}

// ScanAsOf is Scan (ScanReverse with reverse) as of horizon h: see
// chain.StageState.
func (s *stageState) ScanAsOf(h int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) error {
	return s.p.scanAsOf(s.stage, h, lo, hi, reverse, fn)
}
