package store

// backend is the persisted layer under the overlay: Pebble in production, a
// map in tests. All of the store's semantics (pending writes, overlay,
// checkpoint contents, eviction) live above it, in partition.go, once.
//
// A backend is safe for concurrent use. Writes happen only through batches;
// the store commits at most one batch per partition at a time.
type backend interface {
	// get returns a copy of the value of key, owned by the caller.
	get(key []byte) (value []byte, ok bool, err error)
	// getSorted calls fn with the value of each of keys (sorted, no
	// duplicates) that exists, in order. value is valid only during the
	// call.
	getSorted(keys [][]byte, fn func(i int, value []byte)) error
	// scan calls fn with every key in [lo, hi), in order, until fn returns
	// false. key is valid only during the call.
	scan(lo, hi []byte, fn func(key []byte) bool) error
	// newBatch starts an empty batch.
	newBatch() batch
	// newBatchSized starts an empty batch with room for about size bytes
	// of keys and values (bulk writes: no growing as it fills).
	newBatchSized(size int) batch
}

// batch is a group of writes that a backend applies atomically and durably.
// The batch copies the keys and values passed to it.
type batch interface {
	set(key, value []byte)
	del(key []byte)
	delRange(lo, hi []byte)
	// commit applies the batch atomically, synced to stable storage before
	// it returns, and releases it. Either all writes are applied or none.
	commit() error
	// commitNoSync is commit without waiting for stable storage: a crash
	// may lose the batch (and every later one), never part of it.
	commitNoSync() error
	// discard releases a batch that was not committed.
	discard()
}
