// Package microbatch is the baseline the chain engine is measured against:
// the micro-batch design of DESIGN.md "The micro-batch baseline" (poll a batch across the assigned
// partitions; for each stage in chain order process the batch's records of
// that stage with a worker pool and wait; wait for the outputs'
// acknowledgements; checkpoint the state; commit), in the variants the
// benchmark needs to give it its best chance:
//
//   - order: per partition (DESIGN.md "The micro-batch baseline") or, with KeyOrder, per key
//     (Sequence in offset order per partition, then each key's records as
//     one task): the key parallelism the chain's stages have;
//   - linger: BatchLinger after the first record (0: a poll returns what
//     has arrived, as Kafka's poll does);
//   - checkpoint: one PartitionStore.Checkpoint (one sync) per partition,
//     or with GroupCheckpoint all partitions of a batch in one synced batch
//     (store.CheckpointAll);
//   - commit: synchronous on the consumer group's client (sarama's session
//     Commit, whose connection also carries the fetches), or with
//     AsyncCommit in the background on a client of its own (committer: an
//     OffsetCommit with the session's generation and member id; a commit in
//     flight is followed by one for the latest offsets).
//
// # What it owns
//
// A Baseline owns, while Run runs, its sarama consumer group and clients,
// one queue per claimed partition (bounded by BatchSize) and the batch
// loop. It shares everything else with the chain, through the chain's
// exported pieces rather than copies of them: the stages' processors and
// decoder, the store, the producer, chain.NewContext for every processor
// call, chain.DeadLetter and chain.ProduceDeadLetter, chain.RetryPolicy and
// chain.EvictBefore. So the designs differ only in how they schedule the
// same work, and any driver of one scenario can run either.
//
// # Guarantees
//
// Outputs equal the reference model's (DESIGN.md "Attribution rules"): a partition's share of
// a batch is cut before the first record a follower stage could not yet
// process under the chain's event-time gate (released after IdleTimeout,
// like the chain's idle release). A batch in hand is finished even if the
// session ends; the commit covers exactly the batches finished, after
// their outputs were acknowledged and their state persisted (with
// AsyncCommit the session's last offsets are committed before it ends).
//
// # Concurrency
//
// Run may be called once per Baseline. Batches, IdleReleases, Syncs and
// Commits may be read from any goroutine; the Checkpointed and Committed
// hooks are called from the batch loop and the committer.
package microbatch
