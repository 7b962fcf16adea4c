// Package store owns the durable window state and stage checkpoints of the
// partitions a process runs: [DB] keeps them in one Pebble database per
// process, [Memory] in an in-memory ordered map (tests, the chaintest
// tester). Both implement chain.Store with the same code; only the persisted
// layer (a small internal backend: get, scan a key range, apply a batch
// atomically) differs.
//
// # State of a partition
//
// OpenPartition returns a chain.PartitionStore for one topic/partition and
// its chain's stages. Its state is two layers:
//
//   - persisted: what the last committed checkpoint batch left in the
//     backend;
//   - pending: per stage, the writes (Set, Delete) the stage made since,
//     each tagged with the offset of the record that made it, in the order
//     they were made; and an overlay, key -> latest write, pending or
//     persisted, kept for the keys that have a pending write.
//
// Get (any stage) reads the overlay, else the backend: it sees every write
// of every stage of the partition, in the order the writes were made.
// Before the backend it asks an in-memory Bloom filter of the keys the
// partition has persisted (built from the backend when the partition is
// opened, added to by every checkpoint before the overlay lets go of the
// keys it persists, rebuilt once deletions have made it too full): a key
// that was never persisted — a deduplication lookup of a new event id, most
// records' only read — costs a hash, not a Pebble Get (filter.go).
//
// # Range reads
//
// Scan and ScanReverse (any stage) pass the entries of a key range [lo, hi)
// in ascending or descending key order and see exactly what Get sees: they
// merge the overlay, whose keys are also kept in key order (a B-tree beside
// the map Get uses), with a backend iterator, the overlay winning on equal
// keys and its pending deletes hiding persisted entries. A range read costs
// one seek plus one step per entry passed: it never reads the rest of the
// partition, so "the latest entry of a prefix below x" costs the same
// whatever the prefix holds. It allocates nothing per step: the overlay is
// read one entry at a time under the partition's mutex, by a seek from the
// last overlay key taken, and the backend's iterator steps in place (one
// iterator per range read; the read's own state is pooled). The caller's
// function runs without any store lock held, so it may call the state.
//
// The B-tree holds only the overlay keys whose first byte some range read
// has covered (and the empty key): the first range read over a byte inserts
// the overlay's keys with it, once, and from then on every new overlay key
// with that byte goes into the tree. Keys that are only ever read by Get —
// the attribution processors' deduplication keys, one per record — cost a
// map entry and no ordered insert or delete. A processor whose range reads
// and point-read keys start with different bytes gets this without asking.
//
// A Pebble iterator reads the snapshot of its creation. A checkpoint that
// commits during a range read and then drops the persisted keys from the
// overlay could leave such a key in neither view; every overlay read
// compares a generation that those drops (and Reset) bump, and reopens the
// iterator at the latest state when it changed (scan.go walks through the
// interleaving). Writes made after a range read began may or may not be
// seen, as with concurrent Gets.
//
// # Reads as of a horizon
//
// GetAsOf and ScanAsOf (chain.StageState) read as of a follower record's
// horizon h: earlier stages' writes of records at offsets >= h are
// invisible, and a key reads as it did before the first of them. Every
// overlay key an earlier stage (one with a later stage) writes has a
// history: its base and the versions a later stage may still have to look
// past, oldest first. A version of stage s at offset w is settled once
// every later stage's checkpointed position is past w; the newest settled
// one becomes the base. A checkpoint persists the versions it covers as one
// entry per key under the reserved user-key prefix histPrefix (value:
// encodeHist), in the same batch and changelog records as the state, and
// deletes it once they settle or the key is evicted; opening a partition
// and FinishRestore turn the entries back into histories (asof.go). Get,
// Scan and ScanReverse never see these entries, and Set refuses user keys
// with the prefix. Keys with a history stay in the overlay while it lasts.
// KeepHistory(false) (chain.HistoryKeeper; a chain WithAsOfReads(false))
// drops the histories, starts none, and has the next checkpoint delete the
// persisted entries.
//
// # Atomicity (DESIGN I4)
//
// Checkpoint(cps, evictBefore) commits ONE synced batch holding, for each
// stage i, its pending writes of records with offset < cps[i].Next or in
// cps[i].Above (the offsets the stage completed above its position, carried
// with it: see commit.Checkpoint), merged across stages in the order they
// were made; the eviction below; and every stage's checkpoint (Next,
// Watermark, Above). Writes of other records stay pending. Hence, after any
// crash:
//
//	a record's state effect is persisted  <=>  its stage's persisted checkpoint covers it
//	                                           (below Next, or in Above)
//
// and the persisted state equals applying, in the order they were made,
// exactly the writes of the records their stage's persisted checkpoint
// covers (plus eviction). The caller keeps each Above closed under
// reads-from (commit.Tracker.AppendCompletedAbove): a carried record never
// read a write of a record that is not covered. A pending write that a later, already persisted write to
// the same key supersedes is dropped instead of written, since writing it
// would move the key back in time. A stage must not write for a record
// below the Next it last checkpointed nor for one in its Above (the chain never does: those records
// are complete). Nothing pending survives Close or a restart.
//
// If a batch fails to commit nothing changes: the writes stay pending and
// the next Checkpoint persists them.
//
// CheckpointAll persists several partitions' checkpoints (of one DB or
// Memory) in one synced batch: each partition's part is exactly what its
// own Checkpoint would write, and all parts are persisted or none (one
// part that cannot be prepared aborts the group; every write stays
// pending). One write and one sync instead of one per partition: the
// benchmark's micro-batch baseline checkpoints every partition of a batch
// with it.
//
// # Eviction
//
// Set takes an expiry (zero time: none; times before 1970 count as already
// expired). Each persisted expiring entry has an item in the partition's
// expiry index, a heap in memory ordered by expiry (expiry.go): built from
// the entries when the partition is opened (every stored value starts with
// its expiry), added to by every checkpoint once its batch is persisted.
// Checkpoint with a non-zero evictBefore deletes, in the same batch, every
// entry whose expiry is <= evictBefore in the state after the batch's
// writes, found through the index; an item whose key was since deleted or
// rewritten with another expiry is stale and only dropped. Items are added,
// never updated: a rewrite leaves a stale one behind until its time comes,
// and eviction tells by the persisted expiry of every expiring key, which
// the index also keeps (a map beside the heap), so eviction reads nothing
// from the backend. A checkpoint whose batch fails puts the items it took back.
// One checkpoint takes at most 100,000 items; the rest wait for the next one
// (bounded batches, DESIGN I9). The index is not persisted: on disk it would
// double a checkpoint's writes (a key per expiring entry written, a
// tombstone per one evicted) and make eviction scan those tombstones. An
// entry whose last pending write has expired by the batch's evictBefore is
// not written at all: the batch deletes its persisted entry if it has one
// (the key filter holds every persisted key), and otherwise leaves no trace
// in the batch or the changelog records — where event time runs ahead of
// the checkpoint interval (a backlog), most short-lived entries are born
// and expire between two checkpoints. An evicted key whose latest write is
// persisted reads as absent afterwards; a newer pending write still reads.
// A key under a stage's Private prefix (chain.PrivateEvicter, private.go)
// is judged for that by its own stage's checkpointed watermark instead of
// evictBefore, when that is later.
//
// # Key layout
//
// All keys of a partition share the prefix
//
//	p/<topic>/<partition: 4 bytes big-endian>/
//
// (topics cannot contain '/', so partitions never see each other's keys, and
// Reset is one range deletion of the prefix), followed by
//
//	k/<user key>                  -> <expiry: 8 bytes BE unix ns, 0 = none><user value>
//	c/<stage name>                -> <1><Next: 8 bytes BE><Watermark: 8 bytes BE>
//	                                 or, with offsets completed above Next,
//	                                 <2><Next><Watermark> then per offset a uvarint
//	                                 of its distance from the previous (Next − 1 for the first)
//	l/                            -> <1><changelog offset: 8 bytes BE><written: unix ns, 8 bytes BE>
//
// and m/version holds the format version of a Pebble database.
//
// # Format versions
//
// The format covers the store's key layout and the values its users write.
// Format 2 kept the store's layout of format 1; what changed was the
// attribution processors' state, from one value per user to one key per
// click and per install (processors/attribution, "State layout"). Format 3
// is format 2 without the persisted expiry index (its keys were
// x/<expiry: 8 bytes BE><user key>): OpenPebble converts a format-2
// database in place, one range deletion per partition and the new version
// in one synced batch; a build that reads format 2 refuses a format-3
// database (ErrCorrupt), so going back to such a build on the same state
// directory needs the directory removed (the state then restores from the
// changelog, or starts empty at the committed positions). A format-1
// database is not migrated: OpenPebble refuses it with ErrOldFormat and a
// message saying to remove the directory, after which every partition
// starts with empty windows at its committed positions (as after a move to
// another instance) and the windows refill from the input. Any other
// unknown format is ErrCorrupt.
//
// # Changelog (DESIGN.md "State that follows its partition")
//
// A partition is also a chain.ChangelogStore: PrepareCheckpoint builds a
// checkpoint's batch without writing it and returns its changelog records —
// the last write of every key the batch writes (a tombstone for a deletion),
// then a tombstone for every key it evicts, in the batch's own order — and
// holds the partition's checkpoint lock until Commit (the batch, with the
// changelog offset under l/, not synced: the changelog already holds the
// records durably, and a crash that loses the batch leaves an earlier
// checkpoint whose offset says where to catch up from) or Abort (nothing
// written, writes stay pending). Restore applies changelog records in unsynced batches of at
// most 4 MiB, each recording the offset after its last record and removing
// the stage checkpoints (it adds the restored keys to the filter of
// persisted keys before each batch commits, and drops the cached scan
// iterators after); FinishRestore writes the checkpoints and the
// offset, synced. Hence, after any crash:
//
//	the persisted entries = the changelog's records below the persisted changelog offset, applied in order
//
// (a plain Checkpoint, which writes no changelog, deletes the offset).
// Compensate and Snapshot turn persisted entries into changelog records
// (cancelling records no commit covers; seeding a changelog). The offset's
// value carries the wall time it was written: a restore does not catch up a
// local state older than the changelog keeps tombstones.
//
// # Memory (DESIGN I9)
//
// The overlay (map and B-tree) and pending lists hold only writes not yet
// checkpointed: they are bounded by the records the chain has in flight
// plus those completed since the last checkpoint. After a checkpoint
// commits, overlay entries with no pending write left are dropped.
//
// # The persisted layer in memory
//
// A partition of a DB reads its persisted keys from a mirror, an in-memory
// B-tree copy of them, while the mirrors of the DB fit in one budget
// (WithStateCacheBytes; none by default): Get, range reads and
// eviction's lookups then never reach Pebble. Every batch
// still goes to Pebble first, and to the mirror once Pebble committed it;
// a partition whose state does not fit when it is opened, or whose mirror
// would grow past the budget, reads Pebble. Which one a partition uses
// changes no result (cache.go). Memory has no mirror: its persisted layer
// is already a map.
//
// # Concurrency
//
// A PartitionStore and its StageStates are safe for concurrent use: stages
// write concurrently, and so do the records of a key-parallel stage. The
// partition's mutex is held only for map and slice operations; backend
// reads of Get run outside it. Checkpoint, Checkpoints, Reset and Close are
// serialised with each other; a Checkpoint does not block writes or reads
// while its batch commits. Get returns a slice the caller must not modify;
// the slices a range read passes are valid only during the call. DB.Close
// waits for range reads in progress (their Pebble iterators) before closing
// Pebble; a range read on a closed partition fails with ErrClosed.
// A partition can be open once at a time (ErrPartitionOpen); after Close it
// can be opened again. DB.Close and Memory.Close close the open partitions
// first.
package store
