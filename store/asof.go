package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// Reads as of a horizon (chain.StageState.GetAsOf, ScanAsOf).
//
// A follower reads its leaders' state as of its record's horizon h: the
// writes of earlier stages made for records at offsets >= h are invisible.
// A leader runs ahead of its followers, so a key it wrote may since have
// been written again by it; the follower must then read the version before.
// The store keeps, per key that an earlier stage wrote, the versions a
// later stage may still have to look past (a history), and persists them
// with the checkpoint that covers them, so that after a restart or a move
// a follower reads exactly what it read the first time.
//
// A version of stage s at offset o is settled once every later stage's
// checkpointed position is past o: every record a later stage will still
// process has a horizon above its position, so it sees the version. The
// newest settled version is the key's base: everything older is dropped.
// A history keeps only unsettled versions, so it holds the writes of the
// leaders' lead over their followers (bounded by the records in flight and
// the buffer, DESIGN I9).
//
// Persisted, a history is one entry of its own under the user key
// histPrefix+key, whose value holds the base and the versions a committed
// checkpoint covers (encodeHist). It is an ordinary entry (no expiry) in
// the batch and in the changelog, so restore, snapshots, standbys and
// compensation carry it like any other; user reads never see it (get
// refuses the prefix, range reads skip it), and opening the partition (or
// finishing a restore) turns such entries back into histories.
//
// A key written by more than one stage is ordered by when the writes were
// made, as everywhere in the store: its history after a restart can differ
// from the one before when a later stage's write to it was pending. The
// guarantee holds for state each key of which one stage writes.

// histPrefix starts the user keys of persisted histories. User keys must not
// start with it (get refuses them, range reads skip them).
const histPrefix = "\xff\xffdifferential.history\x00"

// histVersion is the first byte of a persisted history's value.
const histVersion = 1

type version struct {
	stage int
	off   int64
	val   []byte // nil: deleted
	exp   int64
	// durable: a committed checkpoint covers the write.
	durable bool
}

// keyHist is the history of one overlay key: its base (the value before
// vers[0]) and the unsettled versions, oldest first; the newest is the
// key's latest write (okey.val).
type keyHist struct {
	base    []byte // nil: absent
	baseExp int64
	vers    []version
	// stored is how many versions the persisted entry holds (-1: none is
	// persisted); dirty: the base changed since it was written; unsure: an
	// aborted checkpoint may have put a record of the entry in the
	// changelog, so the next one writes the entry (or its deletion)
	// whatever it holds.
	stored int
	dirty  bool
	unsure bool
}

// asOf is the value a reader of stage r sees at horizon h.
func (kh *keyHist) asOf(r int, h int64) []byte {
	for i := len(kh.vers) - 1; i >= 0; i-- {
		if v := &kh.vers[i]; v.stage >= r || v.off < h {
			return v.val
		}
	}
	return kh.base
}

// isHistKey reports whether a user key is a persisted history's.
func isHistKey[K string | []byte](key K) bool {
	return len(key) >= len(histPrefix) && key[0] == histPrefix[0] && key[1] == histPrefix[1] &&
		string(key[:len(histPrefix)]) == histPrefix
}

// getAsOf is StageState.GetAsOf.
func (p *partitionStore) getAsOf(stage int, h int64, key []byte) ([]byte, bool, error) {
	if stage == 0 || h == math.MaxInt64 {
		return p.get(key)
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, false, p.err("get", ErrClosed)
	}
	var val []byte
	k, ok := p.mu.overlay[string(key)]
	if ok {
		val = k.val
		if k.hist != nil {
			val = k.hist.asOf(stage, h)
		}
	}
	p.mu.Unlock()
	if !ok {
		// Not in the overlay: persisted, or absent. An earlier stage may
		// write the key meanwhile (its history's base is what was read
		// here) and a checkpoint persist that write: the history answers
		// then.
		if p.filter.Load().mayContain(key) {
			v, found, err := p.getPersisted(key)
			if err != nil {
				return nil, false, err
			}
			if found {
				val = v
			}
		}
		if val, ok = p.histAsOf(key, stage, h, val); !ok {
			return nil, false, nil
		}
	}
	if val == nil {
		return nil, false, nil
	}
	return val[:len(val):len(val)], true, nil
}

// histAsOf is what a reader of stage at horizon h sees of key, whose
// persisted value val it read: the history's answer if the key has one now
// (a write of an earlier stage may have entered the overlay, and a
// checkpoint persisted it, since the reader looked), else val. ok is false
// when the key reads as absent.
func (p *partitionStore) histAsOf(key []byte, stage int, h int64, val []byte) (_ []byte, ok bool) {
	p.mu.Lock()
	if k := p.mu.overlay[string(key)]; k != nil && k.hist != nil {
		val = k.hist.asOf(stage, h)
	}
	p.mu.Unlock()
	return val, val != nil
}

// addVersionLocked appends a write to k's history, starting the history
// with base (the key's value before the write) when it has none.
func (p *partitionStore) addVersionLocked(k *okey, stage int, off int64, val []byte, exp int64, base []byte, baseExp int64) {
	if k.hist == nil {
		k.hist = &keyHist{base: base, baseExp: baseExp, stored: -1}
		p.mu.hists[k.key] = k
	}
	k.hist.vers = append(k.hist.vers, version{stage: stage, off: off, val: val, exp: exp})
}

// floorsOf returns, per stage, the offset below which its writes are
// settled under checkpoints cps: the smallest position of the stages after
// it (its own for the last stage).
func floorsOf(cps []commit.Checkpoint) []int64 {
	f := make([]int64, len(cps))
	m := int64(math.MaxInt64)
	for i := len(cps) - 1; i >= 0; i-- {
		if i == len(cps)-1 {
			f[i] = cps[i].Next
		} else {
			f[i] = m
		}
		m = min(m, cps[i].Next)
	}
	return f
}

// settled returns the index of the newest version floors settle, -1 if
// none.
func (kh *keyHist) settled(floors []int64) int {
	for i := len(kh.vers) - 1; i >= 0; i-- {
		if v := &kh.vers[i]; v.off < floors[v.stage] {
			return i
		}
	}
	return -1
}

// prune drops the versions of kh that floors settle: the newest settled
// one becomes the base.
func (kh *keyHist) prune(floors []int64) {
	j := kh.settled(floors)
	if j < 0 {
		return
	}
	kh.base, kh.baseExp = kh.vers[j].val, kh.vers[j].exp
	n := copy(kh.vers, kh.vers[j+1:])
	clear(kh.vers[n:])
	kh.vers = kh.vers[:n]
	kh.dirty = true
}

// histWrites adds to the batch (and the changelog records) the persisted
// histories that checkpoint cps changes: a history's entry holds its base
// and the versions cps or an earlier checkpoint covers; one with none is
// deleted. It records in pc what applied must update.
func (p *partitionStore) histWrites(pc *prepared) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, key := range p.mu.histGone {
		p.ckpt.kbuf = entry(p.ckpt.kbuf[:0], p.ks, histPrefix+key)
		pc.b.del(p.ckpt.kbuf)
		if pc.withRecords {
			pc.addRecord(histPrefix+key, nil)
		}
	}
	pc.histGone = len(p.mu.histGone)
	if len(p.mu.hists) == 0 {
		return
	}
	floors := floorsOf(pc.cps)
	gone := evictedHists(p.mu.hists, pc.evicted, pc.vanished)
	for key, k := range p.mu.hists {
		kh := k.hist
		if gone[key] {
			// Evicted in this batch: no rule can use any persisted
			// version; the entry goes with the key's.
			if kh.stored >= 0 || kh.unsure {
				pc.hists = append(pc.hists, histUpdate{k: k, n: 0})
				p.ckpt.kbuf = entry(p.ckpt.kbuf[:0], p.ks, histPrefix+key)
				pc.b.del(p.ckpt.kbuf)
				if pc.withRecords {
					pc.addRecord(histPrefix+key, nil)
				}
			}
			continue
		}
		// What the history holds once cps settles its versions: the
		// newest settled one is the base (persisted: cps covers it).
		base, baseExp, vers, dirty := kh.base, kh.baseExp, kh.vers, kh.dirty
		if j := kh.settled(floors); j >= 0 {
			base, baseExp, vers, dirty = vers[j].val, vers[j].exp, vers[j+1:], true
		}
		n := 0
		for i := range vers {
			if persists(pc.cps, &vers[i]) {
				n++
			}
		}
		if !kh.unsure && (n == kh.stored && !dirty || n == 0 && kh.stored < 0) {
			continue
		}
		pc.hists = append(pc.hists, histUpdate{k: k, n: n})
		p.ckpt.kbuf = entry(p.ckpt.kbuf[:0], p.ks, histPrefix+key)
		if n == 0 {
			pc.b.del(p.ckpt.kbuf)
			if pc.withRecords {
				pc.addRecord(histPrefix+key, nil)
			}
			continue
		}
		p.ckpt.vbuf = appendValue(p.ckpt.vbuf[:0], 0, encodeHist(nil, base, baseExp, vers, n, pc.cps))
		pc.b.set(p.ckpt.kbuf, p.ckpt.vbuf)
		p.filter.Load().addString(histPrefix + key)
		if pc.withRecords {
			pc.addRecord(histPrefix+key, p.ckpt.vbuf)
		}
	}
}

// evictedHists returns which of the keys evicted or vanished have a
// history.
func evictedHists(hists map[string]*okey, lists ...[]string) map[string]bool {
	var gone map[string]bool
	for _, l := range lists {
		for _, key := range l {
			if _, ok := hists[key]; ok {
				if gone == nil {
					gone = make(map[string]bool)
				}
				gone[key] = true
			}
		}
	}
	return gone
}

// persists reports whether checkpoint cps persists version v: a committed
// checkpoint did, or cps covers it.
func persists(cps []commit.Checkpoint, v *version) bool {
	return v.durable || covers(&cps[v.stage], v.off)
}

// histsAborted marks the histories whose entries an aborted checkpoint
// wrote: its changelog records may have been appended.
func (p *partitionStore) histsAborted(written []histUpdate) {
	if len(written) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range written {
		if kh := u.k.hist; kh != nil {
			kh.unsure = true
		}
	}
}

// KeepHistory implements chain.HistoryKeeper. KeepHistory(false) drops the
// histories (the next checkpoint deletes their persisted entries) and
// starts none: reads as of a horizon then read the latest writes.
func (p *partitionStore) KeepHistory(keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.noHist = !keep
	if keep {
		return
	}
	for key, k := range p.mu.hists {
		if k.hist.stored >= 0 || k.hist.unsure {
			p.mu.histGone = append(p.mu.histGone, key)
		}
		k.hist.stored, k.hist.unsure = -1, false
		p.dropHistLocked(key, k)
	}
}

// histUpdate is a history whose entry a checkpoint writes: its first n
// versions.
type histUpdate struct {
	k *okey
	n int
}

// histsApplied updates the histories after checkpoint cps committed (under
// mu): the written entries are stored, the covered versions durable, and
// versions cps settles are dropped. A history left with no version and no
// persisted entry is dropped, and its key leaves the overlay when no write
// is pending.
func (p *partitionStore) histsAppliedLocked(cps []commit.Checkpoint, written []histUpdate, histGone int, gone [][]string) {
	p.mu.histGone = append(p.mu.histGone[:0], p.mu.histGone[histGone:]...)
	for _, u := range written {
		if kh := u.k.hist; kh != nil {
			kh.stored, kh.dirty, kh.unsure = u.n, false, false
			if u.n == 0 {
				kh.stored = -1
			}
		}
	}
	if len(p.mu.hists) == 0 {
		return // a chain without as-of reads: nothing to settle
	}
	floors := floorsOf(cps)
	evicted := evictedHists(p.mu.hists, gone...)
	for key, k := range p.mu.hists {
		kh := k.hist
		for i := range kh.vers {
			if v := &kh.vers[i]; covers(&cps[v.stage], v.off) {
				v.durable = true
			}
		}
		if evicted[key] {
			// The key's persisted entry is gone: what is left are the
			// writes still pending, over an absent base.
			kh.vers = slices.DeleteFunc(kh.vers, func(v version) bool { return v.durable })
			kh.base, kh.baseExp = nil, 0
		}
		kh.prune(floors)
		if len(kh.vers) == 0 && kh.stored < 0 {
			p.dropHistLocked(key, k)
		}
	}
}

// dropHistLocked drops k's history; the key leaves the overlay when no
// write of it is pending (its latest write is then persisted).
func (p *partitionStore) dropHistLocked(key string, k *okey) {
	k.hist = nil
	delete(p.mu.hists, key)
	if k.pending == 0 {
		delete(p.mu.overlay, key)
		if p.mu.ordered.holds(key) {
			p.mu.keys.Delete(key)
		}
		k.val = nil
	}
}

// encodeHist appends a history's persisted value: <histVersion> <base>
// <uvarint n> n × (<uvarint stage> <varint offset> <value>), a value being
// <0> (absent) or <1><expiry be64><uvarint len><bytes>; the n versions of
// vers that checkpoint cps persists.
func encodeHist(dst, base []byte, baseExp int64, vers []version, n int, cps []commit.Checkpoint) []byte {
	dst = append(dst, histVersion)
	dst = appendHistValue(dst, base, baseExp)
	dst = binary.AppendUvarint(dst, uint64(n))
	for i := range vers {
		v := &vers[i]
		if !persists(cps, v) {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(v.stage))
		dst = binary.AppendVarint(dst, v.off)
		dst = appendHistValue(dst, v.val, v.exp)
	}
	return dst
}

func appendHistValue(dst, val []byte, exp int64) []byte {
	if val == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.BigEndian.AppendUint64(dst, uint64(exp))
	dst = binary.AppendUvarint(dst, uint64(len(val)))
	return append(dst, val...)
}

// decodeHist decodes encodeHist's value (copying the values) for a chain
// of nstages stages.
func decodeHist(v []byte, nstages int) (*keyHist, error) {
	bad := func(what string) (*keyHist, error) {
		return nil, fmt.Errorf("%w: history entry: %s", ErrCorrupt, what)
	}
	if len(v) < 1 || v[0] != histVersion {
		return bad("unknown version")
	}
	v = v[1:]
	kh := &keyHist{}
	var ok bool
	if kh.base, kh.baseExp, v, ok = readHistValue(v); !ok {
		return bad("base")
	}
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)) {
		return bad("count")
	}
	v = v[k:]
	kh.vers = make([]version, n)
	for i := range kh.vers {
		s, k := binary.Uvarint(v)
		if k <= 0 || s >= uint64(nstages) {
			return bad("stage")
		}
		v = v[k:]
		off, k := binary.Varint(v)
		if k <= 0 {
			return bad("offset")
		}
		v = v[k:]
		ver := version{stage: int(s), off: off, durable: true}
		if ver.val, ver.exp, v, ok = readHistValue(v); !ok {
			return bad("value")
		}
		kh.vers[i] = ver
	}
	if len(v) != 0 {
		return bad("trailing bytes")
	}
	kh.stored = len(kh.vers)
	return kh, nil
}

func readHistValue(v []byte) (val []byte, exp int64, rest []byte, ok bool) {
	if len(v) < 1 {
		return nil, 0, nil, false
	}
	if v[0] == 0 {
		return nil, 0, v[1:], true
	}
	if v[0] != 1 || len(v) < 9 {
		return nil, 0, nil, false
	}
	exp = int64(binary.BigEndian.Uint64(v[1:9]))
	l, k := binary.Uvarint(v[9:])
	if k <= 0 || l > uint64(len(v)-9-k) {
		return nil, 0, nil, false
	}
	start := 9 + k
	val = append(make([]byte, 0, l), v[start:start+int(l)]...)
	return val, exp, v[start+int(l):], true
}

// loadHists turns the persisted history entries into the overlay's
// histories, settled by the persisted checkpoints (opening, and after a
// restore: nothing else uses the partition). Entries that the checkpoints
// settle completely are deleted by the next checkpoint.
func (p *partitionStore) loadHists() error {
	lo := entry(nil, p.ks, histPrefix)
	hi := entry(nil, p.ks, histPrefix[:len(histPrefix)-1]+"\x01")
	it, err := p.be.newIter(lo, hi)
	if err != nil {
		return err
	}
	type loaded struct {
		key string
		kh  *keyHist
	}
	var hs []loaded
	prefix := len(entry(nil, p.ks, ""))
	for ok := it.seekGE(lo); ok; ok = it.next() {
		key := string(it.key()[prefix:])
		v := it.value()
		if len(v) < expiryLen {
			return errors.Join(fmt.Errorf("%w: entry %q has %d bytes", ErrCorrupt, key, len(v)), it.close())
		}
		kh, err := decodeHist(userValue(v), len(p.stages))
		if err != nil {
			return errors.Join(fmt.Errorf("key %q: %w", key, err), it.close())
		}
		hs = append(hs, loaded{strings.TrimPrefix(key, histPrefix), kh})
	}
	if err := errors.Join(it.err(), it.close()); err != nil {
		return err
	}
	// The key's own entry decides what it reads now: a history whose
	// newest value is not the entry's (the entry was evicted, or another
	// stage's write was persisted after it) holds nothing a reader may
	// use, and its entry is deleted by the next checkpoint.
	mains := make([][]byte, len(hs))
	mainExps := make([]int64, len(hs))
	present := make([]bool, len(hs))
	for i, h := range hs {
		enc, ok, err := p.getPersistedEnc([]byte(h.key))
		if err != nil {
			return err
		}
		if ok {
			mains[i] = append([]byte{}, userValue(enc)...)
			mainExps[i], present[i] = valueExpiry(enc), true
		}
	}
	var floors []int64
	if cps, ok, err := p.checkpointsLocked(); err != nil {
		return err
	} else if ok {
		floors = floorsOf(cps)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, k := range p.mu.hists {
		p.dropHistLocked(key, k)
	}
	if p.mu.noHist {
		for _, h := range hs {
			p.mu.histGone = append(p.mu.histGone, h.key)
		}
		return nil
	}
	for i, h := range hs {
		newest, has := h.kh.base, h.kh.base != nil
		if n := len(h.kh.vers); n > 0 {
			newest, has = h.kh.vers[n-1].val, h.kh.vers[n-1].val != nil
		}
		if has != present[i] || string(newest) != string(mains[i]) {
			h.kh.vers, h.kh.base, h.kh.baseExp, h.kh.dirty = nil, mains[i], mainExps[i], true
		}
		k := p.mu.overlay[h.key]
		if k == nil {
			k = p.newOkeyLocked(h.key)
			p.mu.overlay[k.key] = k
			if p.mu.ordered.holds(k.key) {
				p.mu.keys.ReplaceOrInsert(k.key, k)
			}
			k.val, k.exp = mains[i], mainExps[i]
			if !present[i] {
				k.val, k.exp = nil, 0
			}
		}
		k.hist = h.kh
		p.mu.hists[k.key] = k
		if floors != nil {
			k.hist.prune(floors)
		}
	}
	return nil
}

var _ chain.StageState = (*stageState)(nil)
