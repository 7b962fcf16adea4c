// Package chain is the engine: for every assigned partition of one topic it
// runs an ordered chain of stages (event-type consumers such as click →
// install → purchase) as independent, pipelined goroutines over the
// partition's log, instead of micro-batches.
//
// # What it owns
//
// One PartitionedConsumerChain (partitionRun) per partition given to
// RunPartition: a fetcher that reads the partition once and decodes every
// record once into a bounded handoff buffer (package buffer); one goroutine
// per stage reading that buffer at its own cursor (a follower that falls out
// of the buffer polls Kafka itself through Source.Poll and returns when the
// buffer covers it again); optional key-parallel workers per stage; a
// contiguous-completion tracker per stage and the commit loop (package
// commit). The Kafka adapter (package kafka) calls RunPartition for every
// claim; the tester (chain/chaintest) does the same with in-memory logs.
//
// # Guarantees (DESIGN.md I1–I10)
//
//   - No overtaking (I1): stage k begins offset o only when stage k−1's
//     position is > o + OffsetDistance and, for records it processes, stage
//     k−1's watermark is > eventTime + Lateness — or, when stage k−1 is idle
//     (completed everything fetched and nothing arrived for IdleTimeout),
//     when its position is > o. A blocked follower sleeps on its leader's
//     progress signal (and a timer for the idle deadline), never in a poll
//     loop.
//   - Exact handoff (I2): a stage's cursor moves only past records it began,
//     in offset order, in buffered and polling mode alike.
//   - Safe commits (I3): a stage's position is the end of its contiguous
//     completed prefix; the partition commits min over stages, with every
//     stage's checkpoint in the metadata, and never moves it backwards.
//   - Exactly-once state (I4): state writes are tagged with their record's
//     offset and persisted with the stage position that covers them, in one
//     batch (Store).
//   - No lost output (I5): a record completes only after Kafka acknowledged
//     its outputs (Producer), so no checkpoint covers an unacknowledged output.
//   - Clean stop (I6, I10): on revoke or shutdown the partition stops
//     beginning records, lets the begun ones finish (ShutdownTimeout), then
//     persists and commits exactly what completed; a restart resumes every
//     stage at its own position, so nothing is repeated.
//   - Bad input (I7, I8): undecodable records are dead-lettered by the first
//     stage and skipped by the others; processor errors are retried with
//     bounded backoff, then dead-lettered; Fatal errors stop the partition
//     after the same final commit.
//   - Bounded memory (I9): the buffer, each stage's in-flight window and the
//     key queues are bounded by options; nothing grows with the input.
//   - State that follows its partition (DESIGN §8, WithChangelog): a
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
//
// # Concurrency
//
// A Chain is safe for concurrent RunPartition calls (one per partition) and
// Stats. Within a partition, each stage goroutine owns its cursor, stream
// time and mode; positions and watermarks are published through atomics
// under the stage's mutex (so they never go backwards) and read lock-free by
// followers. Every goroutine a RunPartition call starts has returned when it
// returns. See DESIGN.md in the repository for the state diagram and the
// races walked through.
package chain
