package store

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// The changelog side of a partition's state (chain.ChangelogStore; DESIGN
// DESIGN.md "State that follows its partition"). A changelog record is keyed by the user key; its value is
//
//	<changelogVersion 1><expiry be64><user value>
//
// (the stored value behind a version byte), nil for a deletion. The
// persisted changelog offset sits under
//
//	l/                             -> <1><offset be64><written: unix ns be64>
//
// and is written in the same batch as the state it describes, so the
// persisted entries are always the changelog's records below it applied in
// order: a checkpoint's records are exactly its batch's entry writes and
// evictions, in the batch's order, and Restore applies records the same way.

const (
	changelogTag     = 'l'
	changelogVersion = 1
	// noChangelog: Checkpoint without a changelog deletes the offset.
	noChangelog = -1
	// snapshotBatch is how many entries one Snapshot callback gets.
	snapshotBatch = 4096
)

var _ chain.ChangelogStore = (*partitionStore)(nil)

func changelogKey(dst []byte, ks keyspace) []byte {
	return appendTagged(dst, ks, changelogTag, "")
}

// encodeChangelogOffset encodes a changelog offset written now (the wall
// clock: a restore compares it with the changelog's tombstone retention).
func encodeChangelogOffset(off int64) []byte {
	v := binary.BigEndian.AppendUint64([]byte{changelogVersion}, uint64(off))
	return binary.BigEndian.AppendUint64(v, uint64(time.Now().UnixNano()))
}

// changelogValue is the changelog value of an encoded stored value (nil for
// a deletion).
func changelogValue(enc []byte) []byte {
	if enc == nil {
		return nil
	}
	v := make([]byte, 1+len(enc))
	v[0] = changelogVersion
	copy(v[1:], enc)
	return v
}

// storedValue is the stored value of a changelog value.
func storedValue(v []byte) ([]byte, error) {
	if len(v) < 1+expiryLen || v[0] != changelogVersion {
		return nil, fmt.Errorf("%w: changelog value of %d bytes, version %x", ErrCorrupt, len(v), v[:min(len(v), 1)])
	}
	return v[1:], nil
}

// prepared is a checkpoint's batch, built and not yet written; it holds the
// partition's ckpt lock until commit or abort.
type prepared struct {
	p       *partitionStore
	cps     []commit.Checkpoint
	b       batch
	ev      int64
	evicted []string
	// vanished: keys whose last write in this batch had expired by its
	// eviction and which had no persisted entry: neither written nor
	// deleted, they read as evicted once the batch is persisted.
	vanished    []string
	complete    bool
	withRecords bool
	records     []chain.ChangelogRecord
	done        bool
	// added: expiry index items of the batch's writes, indexed once it is
	// persisted; popped: the items eviction took out of the index, put back
	// if it is not (indexed: it was).
	added, popped []expiryItem
	indexed       bool
	// hists: the histories whose entries the batch writes (asof.go);
	// histGone: how many of the keys in mu.histGone it deletes.
	hists    []histUpdate
	histGone int
}

var _ chain.PreparedCheckpoint = (*prepared)(nil)

// addRecord appends the changelog record of key's write (enc nil: a
// deletion), key and value in one allocation.
func (pc *prepared) addRecord(key string, enc []byte) {
	n := len(key)
	if enc != nil {
		n += 1 + len(enc)
	}
	buf := make([]byte, n)
	copy(buf, key)
	r := chain.ChangelogRecord{Key: buf[:len(key):len(key)]}
	if enc != nil {
		buf[len(key)] = changelogVersion
		copy(buf[len(key)+1:], enc)
		r.Value = buf[len(key):]
	}
	pc.records = append(pc.records, r)
}

func (pc *prepared) Records() []chain.ChangelogRecord { return pc.records }

func (pc *prepared) Commit(changelogOffset int64) error {
	if pc.done {
		return pc.p.err("checkpoint", fmt.Errorf("%w: prepared checkpoint already committed or aborted", ErrInvalid))
	}
	if changelogOffset < 0 {
		pc.abort()
		return pc.p.err("checkpoint", fmt.Errorf("%w: changelog offset %d", ErrInvalid, changelogOffset))
	}
	return pc.commit(changelogOffset)
}

func (pc *prepared) Abort() {
	if !pc.done {
		pc.abort()
	}
}

func (pc *prepared) abort() {
	pc.b.discard()
	pc.p.histsAborted(pc.hists)
	pc.release()
}

// release drops the scratch and unlocks ckpt, once.
func (pc *prepared) release() {
	if pc.done {
		return
	}
	pc.done = true
	pc.records = nil
	if !pc.indexed {
		pc.p.ckpt.exp.addAll(pc.popped)
	}
	pc.added, pc.popped = nil, nil
	pc.p.clearScratch()
	pc.p.ckpt.Unlock()
}

// PrepareCheckpoint implements chain.ChangelogStore.
func (p *partitionStore) PrepareCheckpoint(cps []commit.Checkpoint, evictBefore time.Time) (chain.PreparedCheckpoint, error) {
	pc, err := p.prepare(cps, evictBefore, true)
	if err != nil {
		return nil, err
	}
	return pc, nil
}

// ChangelogOffset implements chain.ChangelogStore.
func (p *partitionStore) ChangelogOffset() (int64, time.Time, bool, error) {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return 0, time.Time{}, false, p.err("changelog offset", ErrClosed)
	}
	p.ckpt.kbuf = changelogKey(p.ckpt.kbuf[:0], p.ks)
	v, ok, err := p.be.get(p.ckpt.kbuf)
	if err != nil || !ok {
		if err != nil {
			err = p.err("changelog offset", err)
		}
		return 0, time.Time{}, false, err
	}
	if len(v) != 17 || v[0] != changelogVersion {
		return 0, time.Time{}, false, p.err("changelog offset", fmt.Errorf("%w: changelog offset %x", ErrCorrupt, v))
	}
	off := int64(binary.BigEndian.Uint64(v[1:]))
	written := time.Unix(0, int64(binary.BigEndian.Uint64(v[9:])))
	return off, written, true, nil
}

// restoreBatchBytes bounds one restore batch (a variable for the
// benchmark): Pebble turns a batch larger than half its memtable into a
// flushable batch of its own, which rotates the memtable and stalls the
// next writes until it is flushed.
var restoreBatchBytes = 4 << 20

// Restore implements chain.ChangelogStore: unsynced batches of at most
// restoreBatchBytes with the records' entries (and their expiry index
// entries), the changelog offset after their last record (next, after the
// last batch), and the deletion of the stages' checkpoints (point
// deletions: a range deletion per batch would leave Pebble a range tombstone
// to fragment and step over per batch).
func (p *partitionStore) Restore(recs []chain.ChangelogRecord, next int64) error {
	if next < 0 {
		return p.err("restore", fmt.Errorf("%w: changelog offset %d", ErrInvalid, next))
	}
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return p.err("restore", ErrClosed)
	}
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && size < restoreBatchBytes {
			size += 2*len(recs[n].Key) + len(recs[n].Value) + 64
			n++
		}
		off := next
		if n < len(recs) {
			off = recs[n-1].Offset + 1
		}
		if err := p.restoreBatch(recs[:n], off, size); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

func (p *partitionStore) restoreBatch(recs []chain.ChangelogRecord, next int64, size int) error {
	b := p.be.newBatchSized(size + size/4) // entries, record headers
	kb := p.ckpt.kbuf
	// Every key's expiry after the batch (0: deleted or never expires),
	// for the expiry index once the batch is persisted.
	x := &p.ckpt.exp
	sets := 0
	for _, r := range recs {
		kb = entry(kb[:0], p.ks, r.Key)
		if r.Value == nil {
			b.del(kb)
			x.record(expiryItem{key: string(r.Key)})
			continue
		}
		enc, err := storedValue(r.Value)
		if err != nil {
			b.discard()
			x.drop()
			return p.err("restore", fmt.Errorf("changelog offset %d, key %q: %w", r.Offset, r.Key, err))
		}
		b.set(kb, enc)
		// Before the batch commits: a get that misses the filter does not
		// read the backend (keyFilter's invariant).
		p.filter.Load().add(r.Key)
		sets++
		x.record(expiryItem{exp: valueExpiry(enc), key: string(r.Key)})
	}
	for _, s := range p.stages {
		kb = checkpointKey(kb[:0], p.ks, s)
		b.del(kb)
	}
	kb = changelogKey(kb[:0], p.ks)
	b.set(kb, encodeChangelogOffset(next))
	p.ckpt.kbuf = kb
	if err := b.commitNoSync(); err != nil {
		x.drop()
		return p.err("restore", err)
	}
	x.keep(sets)
	// The backend changed under the cached scan iterators.
	p.mu.Lock()
	stale := p.newGenLocked()
	p.mu.Unlock()
	closeIters(stale)
	return nil
}

// FinishRestore implements chain.ChangelogStore.
func (p *partitionStore) FinishRestore(cps []commit.Checkpoint, changelogOffset int64) error {
	if changelogOffset < 0 {
		return p.err("restore", fmt.Errorf("%w: changelog offset %d", ErrInvalid, changelogOffset))
	}
	if cps != nil {
		if err := p.checkCheckpoints(cps); err != nil {
			return p.err("restore", err)
		}
	}
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return p.err("restore", ErrClosed)
	}
	b := p.be.newBatch()
	for i, cp := range cps {
		p.ckpt.kbuf = checkpointKey(p.ckpt.kbuf[:0], p.ks, p.stages[i])
		b.set(p.ckpt.kbuf, encodeCheckpoint(cp))
	}
	p.ckpt.kbuf = changelogKey(p.ckpt.kbuf[:0], p.ks)
	b.set(p.ckpt.kbuf, encodeChangelogOffset(changelogOffset))
	if err := b.commit(); err != nil {
		return p.err("restore", err)
	}
	// Here rather than at the first checkpoint, which would otherwise do
	// them with the stages' state changes waiting: the expiry index takes in
	// the restored entries, and a restore into an empty partition, which
	// outgrows the empty partition's key filter at once, gets a filter built
	// from the restored keys instead of the two scans of every entry that
	// rebuildFilterIfFull would make. (Every key the filter was given is
	// among them when it counted as many as the restore's writes.)
	x := &p.ckpt.exp
	if f := p.filter.Load(); f.full() && f.added.Load() == x.keptSets {
		p.filter.Store(x.keptFilter())
	}
	x.settle()
	// The restored state's histories replace whatever the local state had.
	if err := p.loadHists(); err != nil {
		return p.err("restore", err)
	}
	return nil
}

// Compensate implements chain.ChangelogStore.
func (p *partitionStore) Compensate(keys [][]byte) ([]chain.ChangelogRecord, error) {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return nil, p.err("compensate", ErrClosed)
	}
	out := make([]chain.ChangelogRecord, len(keys))
	for i, k := range keys {
		p.ckpt.kbuf = entry(p.ckpt.kbuf[:0], p.ks, k)
		enc, ok, err := p.be.get(p.ckpt.kbuf)
		if err != nil {
			return nil, p.err("compensate", err)
		}
		out[i].Key = append([]byte(nil), k...)
		if ok {
			out[i].Value = changelogValue(enc)
		}
	}
	return out, nil
}

// Snapshot implements chain.ChangelogStore: the entries in key order, read in
// batches of snapshotBatch keys.
func (p *partitionStore) Snapshot(fn func([]chain.ChangelogRecord) error) error {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	if p.isClosed() {
		return p.err("snapshot", ErrClosed)
	}
	lo := appendTagged(nil, p.ks, entryTag, "")
	hi := appendTagged(nil, p.ks, entryTag+1, "")
	hi = hi[:len(hi)-1]
	tagLen := len(lo)
	for {
		var keys [][]byte
		err := p.be.scan(lo, hi, func(k []byte) bool {
			keys = append(keys, append([]byte(nil), k...))
			return len(keys) < snapshotBatch
		})
		if err != nil {
			return p.err("snapshot", err)
		}
		if len(keys) == 0 {
			return nil
		}
		recs := make([]chain.ChangelogRecord, 0, len(keys))
		err = p.be.getSorted(keys, func(i int, v []byte) {
			recs = append(recs, chain.ChangelogRecord{Key: keys[i][tagLen:], Value: changelogValue(v)})
		})
		if err != nil {
			return p.err("snapshot", err)
		}
		if err := fn(recs); err != nil {
			return err
		}
		if len(keys) < snapshotBatch {
			return nil
		}
		lo = append(append([]byte(nil), keys[len(keys)-1]...), 0) // just after the last key read
	}
}
