package store

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// keyFilter is a Bloom filter over the user keys a partition has persisted:
// every key whose persisted entry exists is in it (deleted and evicted keys
// may stay: false positives only cost a backend read). get consults it
// before the backend, so that the read of a key that was never written —
// the deduplication lookup of an event id seen for the first time, most
// records' only read — costs a hash instead of a Pebble Get through every
// level.
//
// Invariant: a key is added before the checkpoint that persists it drops it
// from the overlay (writeFlushed adds it while building the batch), and a
// filter built from the backend (open, rebuild) is built while no
// checkpoint can commit (under ckpt, or before the partition is shared).
// Any other path that writes entries to the backend must add its keys or
// rebuild the filter before a get can miss them: restoreBatch adds every
// restored key before its batch commits. So
// a get that misses the overlay finds every persisted key in the filter:
// its overlay check under mu follows the drop, which follows the add.
//
// Deleted keys are never removed, so the false-positive rate grows with the
// keys written since the filter was built; Checkpoint rebuilds it from the
// backend once that count passes its capacity (about twice the keys it was
// built with), which costs one scan of the partition's entries per that
// many writes.
//
// Bits are set with atomic Or and read with atomic loads: get reads while
// Checkpoint adds.
type keyFilter struct {
	seed     maphash.Seed
	words    []atomic.Uint64
	mask     uint64 // bits − 1 (bits is a power of two)
	capacity int64
	added    atomic.Int64 // keys added, including those it was built with
}

// filterBitsPerKey and filterProbes give a false-positive rate of about 1%
// at capacity.
const (
	filterBitsPerKey = 10
	filterProbes     = 7
)

// minFilterCapacity is the capacity of the filter of an empty partition:
// 4,096 keys, an 8 KiB filter. It is small because an instance may hold a
// thousand partitions, most of them with little state; a partition whose
// keys outgrow it gets a filter twice its persisted keys at the next
// checkpoint (rebuildFilterIfFull), so the rebuilds' scans cost a constant
// per key written.
var minFilterCapacity int64 = 1 << 12

func newKeyFilter(keys int64) *keyFilter {
	capacity := max(2*keys, minFilterCapacity)
	nbits := uint64(1) << bits.Len64(uint64(capacity*filterBitsPerKey-1))
	return &keyFilter{
		seed:     maphash.MakeSeed(),
		words:    make([]atomic.Uint64, nbits/64),
		mask:     nbits - 1,
		capacity: capacity,
	}
}

// hash returns the two hashes the probes of key combine.
func (f *keyFilter) hash(key []byte) (h1, h2 uint64) {
	h := maphash.Bytes(f.seed, key)
	return h, h>>32 | h<<32 | 1 // odd: the probes cycle through every bit
}

func (f *keyFilter) add(key []byte) {
	h := maphash.Bytes(f.seed, key)
	f.addHash(h, h>>32|h<<32|1)
}

// addString adds key as add does ([maphash.String] hashes as [maphash.Bytes]).
func (f *keyFilter) addString(key string) {
	h := maphash.String(f.seed, key)
	f.addHash(h, h>>32|h<<32|1)
}

func (f *keyFilter) addHash(h1, h2 uint64) {
	for i := range uint64(filterProbes) {
		b := (h1 + i*h2) & f.mask
		f.words[b/64].Or(1 << (b % 64))
	}
	f.added.Add(1)
}

func (f *keyFilter) mayContain(key []byte) bool {
	h1, h2 := f.hash(key)
	for i := range uint64(filterProbes) {
		b := (h1 + i*h2) & f.mask
		if f.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// full reports whether the filter has taken its capacity of keys.
func (f *keyFilter) full() bool { return f.added.Load() > f.capacity }

// buildFilter returns a filter holding every entry key the backend has for
// the partition. The caller makes sure no batch of the partition commits
// meanwhile.
func (p *partitionStore) buildFilter() (*keyFilter, error) {
	lo, hi := p.entryBounds()
	n := int64(0)
	if err := p.be.scan(lo, hi, func(k []byte) bool { n++; return true }); err != nil {
		return nil, err
	}
	f := newKeyFilter(n)
	plen := len(lo)
	err := p.be.scan(lo, hi, func(k []byte) bool {
		f.add(k[plen:])
		return true
	})
	return f, err
}

// entryBounds is the range [lo, hi) of the partition's entry keys.
func (p *partitionStore) entryBounds() (lo, hi []byte) { return entryRange(p.ks) }

// entryRange is the range [lo, hi) of ks's entry keys.
func entryRange(ks keyspace) (lo, hi []byte) {
	lo = appendTagged(nil, ks, entryTag, "")
	hi = append(append([]byte(nil), ks.prefix...), entryTag, '/'+1)
	return lo, hi
}

// rebuildFilterIfFull replaces a full filter with one built from the
// backend. Called under ckpt, before a checkpoint builds its batch.
func (p *partitionStore) rebuildFilterIfFull() error {
	if !p.filter.Load().full() {
		return nil
	}
	f, err := p.buildFilter()
	if err != nil {
		return err
	}
	p.filter.Store(f)
	return nil
}
