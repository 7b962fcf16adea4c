package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/differential-dev/differential/chain"
)

// DB is the Pebble-backed [chain.Store]: one Pebble database per process,
// shared by every partition the process runs.
type DB struct {
	engine
	pb *pebbleBackend
}

var _ chain.Store = (*DB)(nil)

// OpenPebble opens (creating if needed) the Pebble database in dir.
func OpenPebble(dir string, opts ...Option) (*DB, error) {
	cfg := config{logger: slog.New(slog.DiscardHandler), cacheBytes: DefaultStateCacheBytes}
	for _, o := range opts {
		o.apply(&cfg)
	}
	po := &pebble.Options{
		FS:                 cfg.fs,
		Logger:             slogLogger{cfg.logger.With("component", "pebble")},
		FormatMajorVersion: pebble.FormatNewest,
		// 64 MB: a batch larger than half the memtable bypasses it as a
		// "flushable batch" (sorted, then flushed to L0 on its own), and a
		// busy partition's checkpoint batch passed 8 MB with a 16 MB
		// memtable. `differential run` on 1,000,000 records
		// (scripts/cli-rate.sh, three pairs): 71-75 flushes and 426-453 MB
		// compacted with 16 MB, 12-14 flushes and 279-329 MB with 64 MB,
		// 50.0-51.4 µs of CPU a record instead of 53.0-53.9.
		// BenchmarkCheckpointUpdates (eviction's point lookups, 1,000
		// updates a checkpoint) costs the same CPU per update either way. The
		// block cache should hold the live window state, which the range
		// reads hit at random: `differential run` on 1M and 3M records
		// (scripts/cli-rate.sh) took 50 and 71 µs of CPU a record with
		// 64 MB, 42 and 56 µs with 512 MB (blocks are cached as they are
		// read, so a small state uses little of it).
		MemTableSize: 64 << 20,
		CacheSize:    512 << 20,
	}
	// Bloom filters (10 bits a key, ~1% false positives) on every level:
	// most deduplication lookups are for event ids never seen, and a Get
	// of an absent key then skips the tables instead of reading a block
	// of each level.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	pdb, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("store: open pebble at %q: %w", dir, err)
	}
	if err := checkFormat(pdb); err != nil {
		return nil, errors.Join(err, pdb.Close())
	}
	db := &DB{pb: &pebbleBackend{}}
	db.pb.mu.db = pdb
	db.engine.init(db.pb)
	if cfg.cacheBytes > 0 {
		db.engine.budget = &cacheBudget{limit: cfg.cacheBytes}
	}
	return db, nil
}

// checkFormat records the store's format version in a new database and
// rejects a database written in another one.
func checkFormat(pdb *pebble.DB) error {
	v, closer, err := pdb.Get(metaVersionKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return pdb.Set(metaVersionKey, binary.BigEndian.AppendUint32(nil, formatVersion), pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("store: read format version: %w", err)
	}
	defer closer.Close()
	switch {
	case bytes.Equal(v, binary.BigEndian.AppendUint32(nil, formatVersion)):
		return nil
	case bytes.Equal(v, binary.BigEndian.AppendUint32(nil, formatIndexed)):
		return dropIndexes(pdb)
	case len(v) == 4 && binary.BigEndian.Uint32(v) < formatVersion:
		return fmt.Errorf("%w: format %d, this version reads format %d (the attribution state is one key per click "+
			"and per install since format 2) and does not convert it; remove the directory to start with empty windows "+
			"(the stages resume at their committed positions, as after a move to another instance)",
			ErrOldFormat, binary.BigEndian.Uint32(v), formatVersion)
	}
	return fmt.Errorf("%w: format version %x, want %d", ErrCorrupt, v, formatVersion)
}

// dropIndexes converts a format-2 database to format 3: the same entries
// and checkpoints, without the persisted expiry index (format 3 keeps it in
// memory, built from the entries when a partition is opened). One range
// deletion per partition and the new version, in one synced batch.
func dropIndexes(pdb *pebble.DB) error {
	it, err := pdb.NewIter(&pebble.IterOptions{LowerBound: []byte("p/"), UpperBound: []byte("p0")})
	if err != nil {
		return fmt.Errorf("store: convert format %d: %w", formatIndexed, err)
	}
	b := pdb.NewBatch()
	defer b.Close()
	for ok := it.First(); ok; {
		prefix, found := partitionPrefix(it.Key())
		if !found {
			return errors.Join(fmt.Errorf("%w: key %q outside any partition's layout", ErrCorrupt, it.Key()), it.Close())
		}
		ks := keyspace{prefix: prefix}
		lo := appendTagged(nil, ks, indexTag, "")
		_ = b.DeleteRange(lo, appendTagged(nil, ks, indexTag+1, "")[:len(lo)-1], nil)
		ok = it.SeekGE(ks.end())
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: convert format %d: %w", formatIndexed, err)
	}
	_ = b.Set(metaVersionKey, binary.BigEndian.AppendUint32(nil, formatVersion), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: convert format %d: %w", formatIndexed, err)
	}
	return nil
}

// Close closes every open partition (waiting for a checkpoint in progress
// and dropping pending writes), then the Pebble database.
func (db *DB) Close() error {
	if err := db.engine.close(); err != nil {
		return err
	}
	return db.pb.close()
}

// pebbleBackend guards the *pebble.DB against use after Close (Pebble
// panics then): every operation holds the read lock, Close the write lock.
// Iterators live across calls (a scan runs the caller's code between its
// steps), so instead of the lock they hold a count in iters, registered
// under the read lock; Close stops new ones and waits for the open ones.
type pebbleBackend struct {
	mu struct {
		sync.RWMutex
		db *pebble.DB // nil once closed
	}
	iters sync.WaitGroup
}

func (pb *pebbleBackend) close() error {
	pb.mu.Lock()
	db := pb.mu.db
	pb.mu.db = nil
	pb.mu.Unlock()
	if db == nil {
		return nil
	}
	pb.iters.Wait()
	if err := db.Close(); err != nil {
		return fmt.Errorf("store: close pebble: %w", err)
	}
	return nil
}

func (pb *pebbleBackend) newIter(lo, hi []byte) (backendIter, error) {
	pb.mu.RLock()
	defer pb.mu.RUnlock()
	if pb.mu.db == nil {
		return nil, ErrClosed
	}
	it := &pebbleIter{pb: pb, db: pb.mu.db}
	it.copyBounds(lo, hi)
	var err error
	if it.it, err = it.db.NewIter(&it.opts); err != nil {
		return nil, err
	}
	pb.iters.Add(1)
	return it, nil
}

// pebbleIter is a backendIter over a Pebble iterator, which reads the
// snapshot of its creation; refresh opens a new one.
type pebbleIter struct {
	pb   *pebbleBackend
	db   *pebble.DB
	opts pebble.IterOptions
	it   *pebble.Iterator
	e    error
	// bounds: two pairs of buffers used in turn, because Pebble compares
	// the old bounds with the new ones in SetBounds and keeps the slices.
	bounds [2][2][]byte
	cur    int
}

func (it *pebbleIter) copyBounds(lo, hi []byte) {
	it.cur = 1 - it.cur
	b := &it.bounds[it.cur]
	b[0], b[1] = append(b[0][:0], lo...), append(b[1][:0], hi...)
	it.opts.LowerBound, it.opts.UpperBound = b[0], b[1]
}

func (it *pebbleIter) setBounds(lo, hi []byte) {
	it.copyBounds(lo, hi)
	it.it.SetBounds(it.opts.LowerBound, it.opts.UpperBound)
}

func (it *pebbleIter) seekGE(key []byte) bool { return it.it.SeekGE(key) }
func (it *pebbleIter) seekLT(key []byte) bool { return it.it.SeekLT(key) }
func (it *pebbleIter) next() bool             { return it.it.Next() }
func (it *pebbleIter) prev() bool             { return it.it.Prev() }
func (it *pebbleIter) key() []byte            { return it.it.Key() }

func (it *pebbleIter) value() []byte {
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.e = err
		return nil
	}
	return v
}

func (it *pebbleIter) err() error {
	if it.e != nil {
		return it.e
	}
	return it.it.Error()
}

func (it *pebbleIter) refresh() error {
	err := it.it.Close()
	it.it = nil
	if err != nil {
		return err
	}
	// The DB stays open: close waits for this iterator.
	it.it, err = it.db.NewIter(&it.opts)
	return err
}

func (it *pebbleIter) close() error {
	var err error
	if it.it != nil {
		err = it.it.Close()
		it.it = nil
	}
	it.pb.iters.Done()
	return err
}

func (pb *pebbleBackend) get(key []byte) ([]byte, bool, error) {
	pb.mu.RLock()
	defer pb.mu.RUnlock()
	if pb.mu.db == nil {
		return nil, false, ErrClosed
	}
	return readerGet(pb.mu.db, key)
}

// readerGet reads key from r (the DB or a snapshot of it) into a slice of
// its own.
func readerGet(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	return out, true, closer.Close()
}

// getSorted seeks one iterator to each key in turn: the keys are sorted,
// so every seek goes forward and Pebble steps from where the last one
// ended when that is shorter than seeking again.
func (pb *pebbleBackend) getSorted(keys [][]byte, fn func(i int, value []byte)) (err error) {
	if len(keys) == 0 {
		return nil
	}
	pb.mu.RLock()
	defer pb.mu.RUnlock()
	if pb.mu.db == nil {
		return ErrClosed
	}
	last := keys[len(keys)-1]
	hi := append(last[:len(last):len(last)], 0)
	it, err := pb.mu.db.NewIter(&pebble.IterOptions{LowerBound: keys[0], UpperBound: hi})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for i, k := range keys {
		if !it.SeekGE(k) {
			break
		}
		if bytes.Equal(it.Key(), k) {
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			fn(i, v)
		}
	}
	return it.Error()
}

func (pb *pebbleBackend) scan(lo, hi []byte, fn func(key []byte) bool) (err error) {
	pb.mu.RLock()
	defer pb.mu.RUnlock()
	if pb.mu.db == nil {
		return ErrClosed
	}
	it, err := pb.mu.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(it.Key()) {
			break
		}
	}
	return it.Error()
}

func (pb *pebbleBackend) newBatch() batch { return &pebbleBatch{pb: pb} }

func (pb *pebbleBackend) newBatchSized(size int) batch { return &pebbleBatch{pb: pb, capacity: size} }

// pebbleBatch builds a pebble.Batch lazily, so that creating one never
// touches a closed DB.
type pebbleBatch struct {
	pb       *pebbleBackend
	b        *pebble.Batch
	err      error
	capacity int // initial capacity, 0: pebble's default
}

// init creates the pebble batch on first use; a closed DB leaves b nil and
// the error for commit.
func (b *pebbleBatch) init() bool {
	if b.b != nil || b.err != nil {
		return b.err == nil
	}
	b.pb.mu.RLock()
	defer b.pb.mu.RUnlock()
	if b.pb.mu.db == nil {
		b.err = ErrClosed
		return false
	}
	if b.capacity > 0 {
		b.b = b.pb.mu.db.NewBatchWithSize(b.capacity)
	} else {
		b.b = b.pb.mu.db.NewBatch()
	}
	return true
}

// The pebble.Batch methods below return an error only for a batch that is
// read-only or already committed, which ours never is.

func (b *pebbleBatch) set(key, value []byte) {
	if b.init() {
		_ = b.b.Set(key, value, nil)
	}
}

func (b *pebbleBatch) del(key []byte) {
	if b.init() {
		_ = b.b.Delete(key, nil)
	}
}

func (b *pebbleBatch) delRange(lo, hi []byte) {
	if b.init() {
		_ = b.b.DeleteRange(lo, hi, nil)
	}
}

func (b *pebbleBatch) commit() error { return b.commitWith(pebble.Sync) }

func (b *pebbleBatch) commitNoSync() error { return b.commitWith(pebble.NoSync) }

func (b *pebbleBatch) commitWith(opts *pebble.WriteOptions) error {
	if !b.init() {
		return b.err
	}
	defer b.discard()
	b.pb.mu.RLock()
	defer b.pb.mu.RUnlock()
	if b.pb.mu.db == nil {
		return ErrClosed
	}
	return b.b.Commit(opts)
}

func (b *pebbleBatch) size() int {
	if b.b == nil {
		return 0
	}
	return len(b.b.Repr())
}

func (b *pebbleBatch) discard() {
	if b.b != nil {
		_ = b.b.Close()
		b.b = nil
	}
}
