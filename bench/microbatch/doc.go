// Package microbatch is the baseline the chain engine is measured against:
// the micro-batch design of DESIGN §6 (poll a batch across the assigned
// partitions; for each stage in chain order process the batch's records of
// that stage with a worker pool and wait; wait for the outputs'
// acknowledgements; checkpoint the state; commit).
//
// # What it owns
//
// A Baseline owns, while Run runs, its sarama consumer group and client,
// one queue per claimed partition (bounded by BatchSize) and the batch
// loop. It shares everything else with the chain, through the chain's
// exported pieces rather than copies of them: the stages' processors and
// decoder, the store, the producer, chain.NewContext for every processor
// call, chain.DeadLetter and chain.ProduceDeadLetter, chain.RetryPolicy and
// chain.EvictBefore. So the two designs differ only in how they schedule
// the same work, and any driver of one scenario can run either.
//
// # Guarantees
//
// Outputs equal the reference model's (DESIGN §5): a partition's share of
// a batch is cut before the first record a follower stage could not yet
// process under the chain's event-time gate (released after IdleTimeout,
// like the chain's idle release). A batch in hand is finished even if the
// session ends; the commit covers exactly the batches finished, after
// their outputs were acknowledged and their state persisted.
//
// # Concurrency
//
// Run may be called once per Baseline. Batches and IdleReleases may be
// read from any goroutine.
package microbatch
