package store

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/differential-dev/differential/commit"
)

// PartitionSnapshot is a consistent read-only view of one partition's
// persisted state: its entries and every stage's checkpoint as one Pebble
// snapshot holds them. A checkpoint is written in one atomic batch with the
// entries of the records before it, so each stage's entries in the
// snapshot are exactly its state at its checkpoint's Next. Pending
// (uncheckpointed) writes of a running chain are not seen. Close it when
// done; DB.Close waits for open snapshots.
type PartitionSnapshot struct {
	pb   *pebbleBackend
	snap *pebble.Snapshot
	ks   keyspace
}

// Snapshot opens a snapshot of the persisted state of topic's partition.
func (db *DB) Snapshot(topic string, partition int32) (*PartitionSnapshot, error) {
	pb := db.pb
	pb.mu.RLock()
	defer pb.mu.RUnlock()
	if pb.mu.db == nil {
		return nil, ErrClosed
	}
	pb.iters.Add(1)
	return &PartitionSnapshot{pb: pb, snap: pb.mu.db.NewSnapshot(), ks: newKeyspace(topic, partition)}, nil
}

// Close releases the snapshot.
func (s *PartitionSnapshot) Close() error {
	if s.snap == nil {
		return nil
	}
	err := s.snap.Close()
	s.snap = nil
	s.pb.iters.Done()
	return err
}

// Checkpoint returns stage's checkpoint in the snapshot; ok is false when
// the stage has none persisted.
func (s *PartitionSnapshot) Checkpoint(stage string) (cp commit.Checkpoint, ok bool, err error) {
	v, ok, err := s.get(checkpointKey(nil, s.ks, stage))
	if err != nil || !ok {
		return commit.Checkpoint{}, false, err
	}
	cp, err = decodeCheckpoint(stage, v)
	return cp, err == nil, err
}

// Get returns the user value of the entry key (a stage's own key, without
// the partition's prefix) in the snapshot, expiry stripped.
func (s *PartitionSnapshot) Get(key []byte) ([]byte, bool, error) {
	v, ok, err := s.get(entry(nil, s.ks, key))
	if err != nil || !ok {
		return nil, false, err
	}
	if len(v) < expiryLen {
		return nil, false, ErrCorrupt
	}
	return userValue(v), true, nil // v is get's own copy
}

func (s *PartitionSnapshot) get(k []byte) ([]byte, bool, error) {
	if s.snap == nil {
		return nil, false, ErrClosed
	}
	return readerGet(s.snap, k)
}

// Scan calls fn with every entry whose key is in [lo, hi) (hi nil: every
// key from lo on), in ascending key order, until fn returns false. key and
// value are valid only during the call.
func (s *PartitionSnapshot) Scan(lo, hi []byte, fn func(key, value []byte) bool) (err error) {
	if s.snap == nil {
		return ErrClosed
	}
	base, upper := entryRange(s.ks)
	if hi != nil {
		upper = entry(nil, s.ks, hi)
	}
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: entry(nil, s.ks, lo), UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if len(v) < expiryLen {
			return ErrCorrupt
		}
		if !fn(it.Key()[len(base):], userValue(v)) {
			break
		}
	}
	return it.Error()
}
