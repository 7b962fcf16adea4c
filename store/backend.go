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
	// newIter opens an iterator over the keys in [lo, hi). It must be
	// closed; the backend's close waits for its open iterators.
	newIter(lo, hi []byte) (backendIter, error)
	// newBatch starts an empty batch.
	newBatch() batch
	// newBatchSized starts an empty batch with room for about size bytes
	// of keys and values (bulk writes: no growing as it fills).
	newBatchSized(size int) batch
}

// backendIter is an ordered iterator over a key range of a backend. The
// positioning methods report whether it is at a key; key and value are
// valid until the next positioning call. It is used by one goroutine.
type backendIter interface {
	seekGE(key []byte) bool
	seekLT(key []byte) bool
	next() bool
	prev() bool
	key() []byte
	value() []byte
	// err is the error that made the last positioning call report false,
	// if any.
	err() error
	// setBounds restricts the iterator to [lo, hi) (it copies them); it
	// must be positioned again afterwards.
	setBounds(lo, hi []byte)
	// refresh makes the iterator read the latest committed state (an
	// iterator may read a snapshot taken when it was opened). It must be
	// positioned again afterwards.
	refresh() error
	close() error
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
	// size is about the bytes of the writes added so far: a hint for the
	// next batch of the same kind (newBatchSized).
	size() int
}
