package chain

import (
	"context"
	"time"

	"github.com/differential-dev/differential/commit"
)

// Source is one assigned partition's input, as the Kafka adapter (or the
// chaintest tester) provides it. The engine calls Fetch from one goroutine
// (the partition's fetcher) and Poll from polling followers.
type Source interface {
	// Fetch appends to dst the next records of the partition's main stream,
	// in offset order, blocking until at least one is available. It returns
	// io.EOF when the claim ends (partition revoked or consumer closing) and
	// ctx.Err() when ctx ends.
	Fetch(ctx context.Context, dst []Record) ([]Record, error)
	// HighWatermark is the partition's high watermark as last seen, or -1.
	HighWatermark() int64
	// Poll opens an independent reader of the partition starting at offset
	// from, for a follower that fell out of the handoff buffer.
	Poll(ctx context.Context, from int64) (Poller, error)
}

// LeaderContact is optionally implemented by a Source that can tell when
// the partition's leader last answered it (a fetch or a probe): the
// Kafka adapter's does. Stats reports it as PartitionStats.LeaderContact,
// so a health check can tell a partition whose leader is unreachable
// (nothing fetched, so no lag seen either) from an idle one (answered,
// nothing new). The zero time means unknown.
type LeaderContact interface {
	LeaderContact() time.Time
}

// EndConfirmer is optionally implemented by a Source that can ask the
// partition's log, at the moment of the call, whether the main stream has
// delivered everything in it: the Kafka adapter's does (one Fetch request
// at from, without waiting); chaintest's Log does. The idle release needs
// it (DESIGN.md "Idle release"): a leader that completed everything
// fetched and saw nothing new for IdleTimeout is idle only once a
// confirmation asked after that deadline found nothing more, so a fetcher
// stalled behind records already in the log never makes its leader look
// idle. A Source without it keeps the unconfirmed rule (what was fetched
// plus IdleTimeout).
type EndConfirmer interface {
	// ConfirmEnd reports whether the log holds, at or after offset from,
	// a record Fetch would deliver (more), and end, the offset up to which
	// the log can be read (the high watermark; under read_committed the
	// last stable offset). Offsets Fetch never delivers — transaction
	// markers, compaction gaps, under read_committed the records of
	// aborted transactions and those of transactions still open — are not
	// "more": a log whose tail is only those is at its end. It blocks for
	// at most one round trip to the partition's leader (plus its retries
	// of a tail larger than one fetch) and returns ctx's error when ctx
	// ends first.
	ConfirmEnd(ctx context.Context, from int64) (end int64, more bool, err error)
}

// CommitPending is optionally implemented by a Committer that can tell
// since when a commit has been waiting for the group coordinator's
// acknowledgement: the first attempt of the oldest commit not yet
// acknowledged (a failed commit stays pending until a later one
// succeeds), or the zero time when none is. Stats reports it as
// PartitionStats.CommitPendingSince.
type CommitPending interface {
	CommitPendingSince() time.Time
}

// Poller is a follower's own reader of a partition (polling mode).
type Poller interface {
	// Fetch appends to dst records at or after the poller's position,
	// blocking until at least one is available.
	Fetch(ctx context.Context, dst []Record) ([]Record, error)
	Close() error
}

// Committer commits a partition's consumed offset with metadata to Kafka.
// Commit returns once Kafka acknowledged it (or failed).
type Committer interface {
	Commit(ctx context.Context, offset int64, metadata string) error
}

// Producer sends output and dead-letter records to Kafka.
type Producer interface {
	// Produce hands msgs to Kafka asynchronously and calls done exactly once:
	// with nil after every message is acknowledged, or with the first error.
	// ctx bounds only the hand-over: if it ends while Produce would block
	// (the client's buffer is full), the messages not yet handed over fail
	// with ctx's error. It must not retain the msgs slice after returning
	// (the byte slices the messages point to stay valid). done may run on
	// any goroutine and must not block.
	Produce(ctx context.Context, msgs []Message, done func(error))
}

// Store owns the durable window state and stage checkpoints of the
// partitions this process runs (the Pebble store implements it; so does an
// in-memory one for tests).
type Store interface {
	OpenPartition(topic string, partition int32, stages []string) (PartitionStore, error)
}

// PartitionStore is one partition's state. Safe for concurrent use.
type PartitionStore interface {
	// Checkpoints returns each stage's persisted checkpoint, in the order of
	// the stages given to OpenPartition, and ok=false when none was persisted.
	Checkpoints() (cps []commit.Checkpoint, ok bool, err error)
	// Stage returns the write handle of stage i.
	Stage(i int) StageState
	// Checkpoint persists, in one atomic synced batch, for every stage i the
	// writes it made for records with offset < cps[i].Next, together with
	// cps[i] itself; writes of later records stay pending. It also deletes
	// entries whose expiry is <= evictBefore (when non-zero).
	Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error
	// Reset deletes every persisted and pending entry and checkpoint of the
	// partition (used when the local state is older than the group's commit).
	Reset() error
	// Close drops pending (uncheckpointed) writes and in-memory resources;
	// persisted state stays.
	Close() error
}

// HistoryKeeper is a PartitionStore that keeps, for reads as of a horizon
// (StageState.GetAsOf), the versions of its keys a follower may still have
// to look past. A chain WithAsOfReads(false) calls KeepHistory(false) on every
// partition it opens: the store then keeps none (and drops what it had),
// and reads as of a horizon read what Get reads. A PartitionStore that
// wraps another forwards it.
type HistoryKeeper interface {
	KeepHistory(keep bool)
}

// StageState is one stage's access to its partition's state. Get, Scan and
// ScanReverse see all stages' writes, pending or persisted. Writes are
// tagged with the offset of the record that made them.
//
// GetAsOf and ScanAsOf read the state as of a horizon h: the writes of
// earlier stages (a lower index in the chain) made for records at offsets
// >= h are invisible — the key reads as it did before the first of them —
// while this stage's and later stages' writes stay visible. A follower
// reads as of its record's horizon (Context.Horizon), so that what it sees
// of its leaders is a function of the log, not of how far they had run.
// h = math.MaxInt64 reads what Get reads.
//
// Scan and ScanReverse are ordered range reads: they call fn with every
// entry whose key is in [lo, hi) (hi nil: no upper bound), in ascending
// (descending) key order, until fn returns false, seeing what Get sees. key
// and value are valid only during the call to fn.
//
// Set and Delete copy key (callers reuse key buffers); Set keeps value,
// which its caller does not modify afterwards.
type StageState interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(offset int64, key, value []byte, expires time.Time) error
	Delete(offset int64, key []byte) error
	Scan(lo, hi []byte, fn func(key, value []byte) bool) error
	ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error
	GetAsOf(h int64, key []byte) (value []byte, ok bool, err error)
	ScanAsOf(h int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) error
}
