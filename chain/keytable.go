package chain

// keyTable is a leader stage's records begun and not yet completed, per key:
// what a key-scoped follower (GateKey) asks "has the leader completed every
// record of key k below X?" of, without scanning. The answer needs two
// facts: the leader has begun everything below X (its read frontier,
// stageRun.rd, is ≥ X — the follower checks that first, when it admits a
// record), and no begun record of k below X is pending, which the oldest
// pending record of k tells: records of one key are begun in offset order,
// so it has the smallest offset and the smallest stream time of them all.
//
// A follower that must wait registers what it waits for on the key
// (watch); the completion that satisfies it hands the key to the
// follower's gate (keyGate.moved) and wakes it, so a follower is woken only
// for a key that moved past what it needs, never per completion.
//
// Keys are 64-bit hashes (maphash, one seed per partition): two keys that
// collide are treated as one, which only makes a follower wait for more
// than it must (never less), and keeps the table free of allocations.
//
// Every method is called with the leader's mu held. The table holds one
// entry per pending record (bounded by the leader's in-flight window) plus
// empty per-key entries kept for reuse, swept when they outnumber the
// window (I9).
type keyTable struct {
	keys     map[uint64]*keyPending
	free     []*keyPending // swept entries, reused by begin
	sweepAt  int
	follower *keyGate
}

type keyPending struct {
	// recs is a ring of the key's pending records in offset order: recs[head]
	// is the oldest; n are held. Completed records behind an older pending
	// one stay (done) until the head completes.
	recs    []pendingRec
	head, n int
	// watch: the follower waits until the oldest pending record is beyond
	// (wantOff, wantS) — or there is none.
	watch          bool
	wantOff, wantS int64
}

type pendingRec struct {
	off     int64
	sBefore int64 // S(off): the stream time before the record
	done    bool
}

func newKeyTable(window int, follower *keyGate) *keyTable {
	return &keyTable{keys: make(map[uint64]*keyPending), sweepAt: 2*window + 64, follower: follower}
}

// begin registers the leader's record (off, kh) with stream time sBefore
// before it. Offsets of one key arrive in increasing order.
func (t *keyTable) begin(kh uint64, off, sBefore int64) {
	k := t.keys[kh]
	if k == nil {
		if len(t.keys) >= t.sweepAt {
			t.sweep()
		}
		if n := len(t.free); n > 0 {
			k, t.free = t.free[n-1], t.free[:n-1]
		} else {
			k = &keyPending{recs: make([]pendingRec, 4)}
		}
		t.keys[kh] = k
	}
	k.push(pendingRec{off: off, sBefore: sBefore})
}

// complete marks (off, kh) complete and reports whether the follower must
// be woken: it watched the key and the key's oldest pending record has now
// moved past what it waits for. The key is then on the follower's moved
// list.
func (t *keyTable) complete(kh uint64, off int64) (wake bool) {
	k := t.keys[kh]
	if k == nil || !k.complete(off) || !k.watch || !k.satisfies(k.wantOff, k.wantS) {
		return false
	}
	k.watch = false
	return t.follower.movedLocked(kh)
}

// check reports whether no record of kh is pending with offset ≤ wantOff or
// stream time before ≤ wantS; if one is, it registers the follower's wait
// on the key. pending reports whether the key has a pending record at all,
// and (off, s) is the oldest one's.
func (t *keyTable) check(kh uint64, wantOff, wantS int64) (ok, pending bool, off, s int64) {
	k := t.keys[kh]
	if k == nil || k.n == 0 {
		return true, false, 0, 0
	}
	h := &k.recs[k.head]
	if k.satisfies(wantOff, wantS) {
		return true, true, h.off, h.sBefore
	}
	k.watch, k.wantOff, k.wantS = true, wantOff, wantS
	return false, true, h.off, h.sBefore
}

// sweep deletes the entries of keys with nothing pending and no watcher.
// It runs when the map holds sweepAt entries; at most the leader's window
// of them have pending records, so at least half go and the cost per begin
// stays constant.
func (t *keyTable) sweep() {
	for kh, k := range t.keys {
		if k.n == 0 && !k.watch {
			delete(t.keys, kh)
			k.head = 0
			t.free = append(t.free, k)
		}
	}
}

func (k *keyPending) satisfies(wantOff, wantS int64) bool {
	if k.n == 0 {
		return true
	}
	h := &k.recs[k.head]
	return h.off > wantOff && h.sBefore > wantS
}

func (k *keyPending) at(i int) *pendingRec {
	j := k.head + i
	if j >= len(k.recs) {
		j -= len(k.recs)
	}
	return &k.recs[j]
}

func (k *keyPending) push(r pendingRec) {
	if k.n == len(k.recs) {
		grown := make([]pendingRec, 2*len(k.recs))
		for i := range k.n {
			grown[i] = *k.at(i)
		}
		k.recs, k.head = grown, 0
	}
	*k.at(k.n) = r
	k.n++
}

// complete marks off done and releases the done records at the head;
// it reports whether the head moved.
func (k *keyPending) complete(off int64) (headMoved bool) {
	lo, hi := 0, k.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.at(m).off < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == k.n || k.at(lo).off != off {
		return false // not tracked (begun before the table existed)
	}
	k.at(lo).done = true
	if lo != 0 {
		return false
	}
	for k.n > 0 && k.recs[k.head].done {
		k.recs[k.head] = pendingRec{}
		k.head++
		if k.head == len(k.recs) {
			k.head = 0
		}
		k.n--
	}
	return true
}
