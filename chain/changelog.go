package chain

import (
	"context"
	"time"

	"github.com/differential-dev/differential/commit"
)

// Changelog is where a partition's window state follows the partition from
// instance to instance (DESIGN.md "State that follows its partition"): one compacted topic with the input's
// partition count; the state changes of input partition p go to changelog
// partition p, keyed by the store key. kafka.NewChangelog implements it on a
// Kafka topic; chaintest has an in-memory one. A chain gets one with
// WithChangelog, and then needs a Store whose partitions implement
// ChangelogStore (store.DB and store.Memory do).
type Changelog interface {
	// Partition opens the changelog of one input partition. The chain calls
	// it once per assignment and closes what it returns when the partition
	// stops.
	Partition(topic string, partition int32) (ChangelogPartition, error)
}

// TombstoneRetention is implemented by a Changelog whose compaction drops
// tombstones some time after they were written (Kafka's
// delete.retention.ms): a local state older than that may have missed
// deletions that are no longer in the changelog, so a restore does not
// catch it up but rebuilds it from the start. A Changelog that does not
// implement it, or returns 0, keeps tombstones for ever.
type TombstoneRetention interface {
	TombstoneRetention() time.Duration
}

// ChangelogPartition is the changelog of one input partition. The chain
// calls it from one goroutine at a time.
type ChangelogPartition interface {
	// End returns the offset after the partition's last record (its high
	// watermark).
	End(ctx context.Context) (int64, error)
	// Read calls fn with the records at offsets in [from, to), in offset
	// order and in batches, and returns once every offset below to has been
	// passed. Offsets with no record (compaction) are stepped over. fn must
	// not keep the slice or the records' bytes after it returns; an error
	// from fn stops the read and is returned.
	Read(ctx context.Context, from, to int64, fn func([]ChangelogRecord) error) error
	// Append writes recs in order and returns, once Kafka has acknowledged
	// every one of them (acks=all, idempotent: a retry neither duplicates nor
	// reorders), the offset after the last one. An error means any prefix of
	// recs may have been written.
	Append(ctx context.Context, recs []ChangelogRecord) (end int64, err error)
	// Close releases the partition's resources.
	Close() error
}

// ChangelogRecord is one state change as the changelog holds it: Key is
// the store key, Value the stored value in the store's own encoding, nil for
// a deletion (a tombstone: a write of nil, or an eviction).
type ChangelogRecord struct {
	// Offset is the record's changelog offset (set by Read; Append ignores
	// it).
	Offset int64
	Key    []byte
	Value  []byte
}

// ChangelogStore is a PartitionStore whose state can be written to a
// changelog at every checkpoint and rebuilt from it (store.DB and
// store.Memory implement it).
//
// Invariant: whenever the persisted state records a changelog offset L, the
// persisted entries are exactly the changelog's records below L applied in
// order (writes and tombstones).
type ChangelogStore interface {
	PartitionStore
	// ChangelogOffset returns the changelog offset recorded with the
	// persisted state and when it was written (wall clock); ok is false
	// when none is (a new or reset partition, or state checkpointed without
	// a changelog).
	ChangelogOffset() (offset int64, written time.Time, ok bool, err error)
	// PrepareCheckpoint does what Checkpoint does up to the write: it takes
	// the pending writes the checkpoint covers and the evictions, and
	// returns them as the changelog records that bring the changelog's state
	// to the checkpoint's. Nothing is written until Commit. Until Commit or
	// Abort, no other checkpoint, Reset, Restore or Close runs on the
	// partition; reads and writes go on.
	PrepareCheckpoint(cps []commit.Checkpoint, evictBefore time.Time) (PreparedCheckpoint, error)
	// Restore applies changelog records, in order, to the persisted state
	// and records next (the offset after them) as its changelog offset. It
	// removes the stage checkpoints: until FinishRestore the state is not at
	// any position. The batch need not be synced. Call it only while no
	// stage runs.
	Restore(recs []ChangelogRecord, next int64) error
	// FinishRestore records the stage checkpoints (none when cps is nil)
	// and the changelog offset, in one synced batch.
	FinishRestore(cps []commit.Checkpoint, changelogOffset int64) error
	// Compensate returns, for each key, the record that sets it to its
	// persisted value (a tombstone when it has none): appended after records
	// written by an instance that crashed before its commit, they cancel
	// them.
	Compensate(keys [][]byte) ([]ChangelogRecord, error)
	// Snapshot calls fn with every persisted entry as a changelog record, in
	// batches (to seed an empty or unknown changelog with local state). fn
	// must not keep the slice.
	Snapshot(fn func([]ChangelogRecord) error) error
}

// PreparedCheckpoint is a checkpoint whose changelog records are known and
// whose batch is not yet written (ChangelogStore.PrepareCheckpoint).
//
// In at-least-once mode the chain appends Records to the changelog, waits
// for the acknowledgement, then calls Commit with the changelog's end
// offset. In exactly-once mode (DESIGN.md "Exactly-once mode") the records go into the open
// Kafka transaction instead, and Commit follows CommitTxn: until then the
// writes stay pending in the store's overlay, readable by the stages, so
// Pebble only ever holds committed state.
type PreparedCheckpoint interface {
	// Records are the changelog records, in the order to append them: the
	// last write of every key written (a tombstone for a deletion), then a
	// tombstone for every evicted key. Valid until Commit or Abort.
	Records() []ChangelogRecord
	// Commit writes the checkpoint's batch — the state, every stage's
	// checkpoint and changelogOffset — synced, and releases the partition.
	Commit(changelogOffset int64) error
	// Abort writes nothing: the writes stay pending (a later checkpoint
	// takes them again) and the partition is released.
	Abort()
}
