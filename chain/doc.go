// Package chain is the engine: for every assigned partition of one topic it
// runs an ordered chain of stages (event-type consumers such as click →
// install → purchase) as independent, pipelined goroutines over the
// partition's log, instead of micro-batches.
//
// # What it owns
//
// One PartitionedConsumerChain (partitionRun) per partition given to
// RunPartition: a fetcher that reads the partition once and decodes every
// record once, straight into its slot of a bounded handoff buffer (package
// buffer; a one-stage chain's stage reads it there, others copy it into
// their batch); one goroutine per stage reading that buffer at its own
// cursor (a follower that falls out of the buffer polls Kafka itself
// through Source.Poll and returns when the buffer covers it again; a
// follower's gate rereads its leader's checkpoint only when the one it
// last saw does not let the record through; the first stage pauses, at
// most 20 ms at a time, when the slowest follower reading the buffer is
// about to be evicted — DESIGN.md "Stage 0 pauses, briefly"); optional
// key-parallel workers per stage, optionally capped across the whole chain
// (WithWorkerCap: slots go to the keys with the most records ready, so a
// hot key's records run back to back); a contiguous-completion tracker per
// stage and the commit loop (package commit). The Kafka adapter (package kafka) calls RunPartition
// for every claim; the tester (chain/chaintest) does the same with
// in-memory logs.
//
// # Guarantees (DESIGN.md I1–I10)
//
//   - No overtaking (I1): stage k begins offset o only when stage k−1's
//     position is > o + OffsetDistance and, for records it processes, stage
//     k−1's watermark is > eventTime + Lateness — or, when the log shows
//     stage k−1 idle after a record L ≥ o (the next record's Kafka
//     timestamp is more than IdleTimeout after L's; at the live tail, no
//     next record and — with a Source that is an EndConfirmer — a read of
//     the log asked after L's timestamp + IdleTimeout found nothing past
//     what was fetched but markers and aborted or open transactions), when
//     its position is > L. Either way the record is processed as of a
//     horizon that is a function of the log (Context.Horizon): the
//     smallest leader position the rule needs, max(o + OffsetDistance + 1,
//     q(t + Lateness)) with q(x) the first offset whose stream time
//     exceeds x, or L+1 when smaller; the follower's state reads are made
//     as of it (StageState.GetAsOf), so its processor sees exactly its
//     leaders' writes of records below it however far they had run, and
//     every replay of the log decides alike. A
//     blocked follower sleeps on its leader's progress signal (and a timer
//     for the idle deadline), never in a poll loop. With Stage.Gate =
//     GateKey the same holds per key (DESIGN.md "The key-scoped gate"): stage k begins (o, t, key) once stage k−1 has
//     completed every record of that key at offsets ≤ o + OffsetDistance
//     and, when processing, below q(t + Lateness); other keys' records go
//     on. The leader keeps its pending records per key and wakes the
//     follower only for a key that moved past what it waits for. Positions
//     never pass the leader's in either scope.
//   - Exact handoff (I2): a stage's cursor moves only past records it began,
//     in offset order, in buffered and polling mode alike.
//   - Safe commits (I3): a stage's position is the end of its contiguous
//     completed prefix; the partition commits min over stages, with every
//     stage's checkpoint in the metadata, and never moves it backwards.
//   - Exactly-once state (I4): state writes are tagged with their record's
//     offset and persisted with the stage position that covers them, in one
//     batch (Store). Each stage's checkpoint is a (position, watermark) pair
//     that existed (published as one value), and the partition's snapshot
//     never stores a follower beyond its leader. Local state that does not
//     belong to the resume positions (stale, or the group's offset reset by
//     a tool below it) is dropped, and the log says why.
//   - Eviction never changes a result: a checkpoint evicts an entry only
//     once every stage that may read it — all of them, or its owner alone
//     for a key under that stage's Private prefixes (ErrPrivateKey keeps the
//     others out) — has a watermark past its expiry.
//   - No lost output (I5): a record completes only after Kafka acknowledged
//     its outputs (Producer), so no checkpoint covers an unacknowledged output.
//   - Clean stop (I6, I10): on revoke or shutdown the partition stops
//     beginning records and lets every begun one finish (ShutdownTimeout) —
//     retries, acknowledgements and, in key-parallel stages, the records
//     queued behind a busy key included. In exactly-once mode (and with
//     WithoutCarriedOffsets, the rolling-upgrade
//     compatibility mode that writes no dfl3 metadata) the records waiting
//     in a key-scoped gate finish
//     too (they wait only for records their leader has begun), so the
//     completed set is contiguous. In at-least-once mode a key-scoped stage
//     begins records as it reads them; at a stop it runs what its finished
//     leader lets through and abandons the rest (with the records of their
//     key behind them, which never ran), and each stage's checkpoint and
//     the commit metadata carry the offsets it completed above its position
//     (commit.Checkpoint.Above; only records with no incomplete earlier
//     record of their key: closed under reads-from). Then it persists and
//     commits exactly what completed, and a restart resumes every stage at
//     its own position, skipping the carried offsets: nothing is repeated. After
//     the timeout the records still in flight are abandoned (not committed,
//     their late errors ignored; RunPartition returns ErrShutdownTimeout),
//     and a processor that ignores its context is left behind after a short
//     grace rather than holding the revoke for ever.
//   - Bad input (I7, I8): undecodable records are dead-lettered by the first
//     stage and skipped by the others (DeadLetter: a record too large for
//     the dead-letter topic is cut, with its size and hash in headers);
//     processor errors are retried with bounded backoff (RetryPolicy), then
//     dead-lettered; Fatal errors stop the partition after the same final
//     commit.
//   - Bounded memory (I9): the buffer, each stage's in-flight window and the
//     key queues (the key-parallel workers', the keys waiting for a worker
//     under WithWorkerCap, and the key-scoped gate's: their records are
//     begun, so within the window) are bounded by options;
//     nothing grows with the input. The buffer holds what the fetcher read
//     ahead of the first stage (a few batches) and what some stage has yet
//     to read; what every stage has read is dropped at once.
//   - State that follows its partition (DESIGN.md "State that follows its partition", WithChangelog): a
//     checkpoint acknowledges outputs, then appends its state changes to the
//     partition's changelog and waits for the acknowledgement, then persists
//     state, positions and changelog offset in one store batch, then commits
//     positions and changelog offset to Kafka. At assignment, before any
//     stage starts, the partition's local state is brought to the committed
//     checkpoint (kept, caught up, or rebuilt from the changelog; records
//     after the committed changelog offset are cancelled, never applied), so
//     a move, a crash or a scale-out changes no result. The restore runs on
//     the partition's goroutine, shows in Stats (PartitionStats.Restore) and
//     stops with the partition's context.
//   - Exactly-once mode (DESIGN.md "Exactly-once mode", WithExactlyOnce): every commit cycle is
//     one transaction of the Transactor across the chain's partitions —
//     outputs, dead letters, changelog records and offsets. A cycle does
//     not pause the stages: it cuts each stage at its begin frontier, waits
//     until the records below the cuts completed and commits positions at
//     most the cuts, while the stages go on with the records above them,
//     whose outputs and dead letters wait (deferred, in order) until the
//     transaction ended and then go into the next one — so a transaction
//     holds exactly the outputs of the records below its offsets; store
//     writes are persisted only after the transaction committed. A failed or fenced
//     transaction is aborted and every partition restarts at its last
//     committed positions with its store overlay dropped (txn.go,
//     txnpartition.go, txncut.go). A Commit that failed may have
//     committed (EndTxn's response lost): a Transactor that implements CommitResolver is asked
//     first — committed, the cycle stands; not committed, it is aborted;
//     unknown, the partitions whose offsets it held fail without a rewind
//     (ErrTxnOutcomeUnknown) and restart from what the brokers hold. A
//     revoke or stop returns after the partition's
//     final transaction committed or was aborted (ErrTxnAborted). Both
//     gate scopes: the records waiting in a key-scoped gate below its cut
//     wait only for leader records below the leader's cut (the admission
//     step; the cuts are taken from the last stage to the first), so the
//     cycle's wait runs them to completion (a rewind rebuilds the key tables empty at the committed positions,
//     where no leader record is pending). A record whose send failed the
//     transaction drops the gated records after it that may wait for it:
//     its epoch is rewound anyway.
//
// Stats also passes on what an assignment's Source and Committer say of
// their contact with the cluster, when they implement the optional
// LeaderContact and CommitPending (the Kafka adapter's do): a partition's
// lag is measured against the high watermark last seen, so a partition
// whose leader is gone shows no lag, and only the contact time tells it
// from an idle one. With an EndConfirmer source a stage that completed
// everything fetched is measured from the end the source confirmed holds
// nothing more to deliver (a transactional tail of markers is no lag; a
// stalled fetcher behind records in the log is); the commit loop asks for
// that once per fetched end when the partition has been quiet for
// IdleTimeout with the high watermark beyond it.
//
// # Concurrency
//
// A Chain is safe for concurrent RunPartition calls (one per partition) and
// Stats. Within a partition, each stage goroutine owns its cursor, stream
// time and mode; checkpoints are published under the stage's mutex (so they
// never go backwards) through a sequence lock and read lock-free by
// followers, the commit loop and Stats. A record a stage runs on its own
// goroutine (no key-parallel workers, no sequencer, no key-scoped follower,
// not exactly-once) is counted as begun before its processor runs and
// entered in the tracker after it, begun and completed under one lock
// acquisition when it completes at once with no outputs (Stats'
// InFlight does not count it while its processor runs). Observers (WithObserver, any number)
// are called from the partition's goroutines, concurrently. Every goroutine
// a RunPartition call starts has returned when it returns, except one stuck
// in a processor that ignores its cancelled context. See DESIGN.md in the
// repository for the state diagram and the races walked through.
//
// # Where the code is
//
// One concept a file. The chain and one partition: chain.go (New,
// RunPartition, Stats), partition.go (partitionRun: fetcher, pace, commit
// loop, stop), restore.go (bringing local state to the committed
// checkpoint), standby.go (warm copies of partitions the chain does not
// run: OpenStandby, Standby.CatchUp), idle.go (gapLog: the idle releases the log shows),
// streamtime.go (the log's stream time steps, for the followers' horizons). One
// stage of one partition:
//
//   - stagerun.go: the stageRun struct, its construction and its workers'
//     start and stop;
//   - stageloop.go: the loop that reads the partition (handoff buffer or
//     own poller) and hands each record on (handle);
//   - leadergate.go: the partition gate and leaderWait, the follower's wait
//     for its leader that both gates share;
//   - begin.go, complete.go: entering a record in the tracker, and its
//     completion or drop (the published checkpoint, the drain's count);
//   - emit.go: the processor under the retry policy, its outputs and dead
//     letters;
//   - dispatch.go, workercap.go: key-parallel workers and the chain-wide
//     cap on them;
//   - checkpoint.go, signal.go: the checkpoint a stage publishes (read
//     lock-free) and the signal its waiters sleep on.
//
// The key-scoped gate: keygate.go (its types), keyadmit.go (reading,
// admission and the offer to the gate), keyrelease.go (running the keys the
// leader hands back), keyblock.go (the eager gate's blocking wait),
// keystop.go (the drain at a stop and the transaction's doomed records),
// keytable.go (the leader's pending records per key). Exactly-once mode:
// txn.go (the coordinator and its cycles), txnpartition.go (a partition's
// epochs and deferred sends), txncut.go (cycleCut: what a stage's begins,
// completions and sends tell its mode's cycles — nothing at least once,
// the cut exactly once). The API: options.go, record.go,
// stage.go, gate.go, context.go, io.go, observer.go, tracing.go,
// changelog.go, errors.go, stats.go, retry.go, deadletter.go.
//
// # For other drivers of the same processors
//
// NewContext, RetryPolicy, DeadLetter, ProduceDeadLetter and EvictBefore are
// the engine's own rules, exported so that a different scheduler of the
// same processors (the micro-batch baseline, bench/microbatch) applies them
// identically instead of copying them.
package chain
