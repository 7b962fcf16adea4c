// Package bench measures the chain engine against the design it replaces,
// micro-batching (DESIGN §6), on the same broker, input, processors,
// decoder, state store, producer and worker cap, and checks in every run
// that both produce exactly what the reference model prescribes. The CLI's
// `differential bench` calls Run and prints Report.WriteTable; its flags map
// one to one to Options.
//
// # What runs
//
// For every measured point (a workload at a partition count P and worker
// cap W) Run generates the input with internal/workload (seeded; the
// generator's parameters are printed with every result), writes it to a
// fresh topic (workload.Writer, on internal/cluster's broker) — each record
// at its workload partition and offset, with its
// workload timestamp (the decoder's clock-skew rule reads it) and its cost
// in the header CostHeader ("bench-cost-us") — and runs, one after another
// (alternating chain, micro-batch, chain, … with Repeats > 1; the median
// run by throughput is reported):
//
//   - chain: attribution.NewChainWith through kafka.Run (its own sarama
//     clients), every stage with KeyConcurrency = W, the followers' gate
//     scope Options.Gate (key by default), the store (Pebble in a fresh
//     directory, or memory), kafka.NewProducer, output and dead-letter
//     topics of its own, a fresh consumer group; for A and C also the same
//     chain with the other gate scope (the rows chain/key and
//     chain/partition; Options.OneGate skips it);
//   - microbatch: the baseline (package bench/microbatch): a sarama consumer group
//     with its own client polls up to BatchSize records (or until
//     BatchLinger after the first), round-robin across partitions; then for
//     each stage in chain order a pool of W workers processes the batch's
//     records of that stage, each partition's in offset order, Sequence
//     before Process with StreamTime computed over valid records as the
//     engine does; it waits for the outputs' acknowledgements, persists
//     every partition's state with PartitionStore.Checkpoint and commits.
//     Same processors, decoder, store type, producer, dead letters
//     (chain.DeadLetter), retry policy (chain.RetryPolicy) and eviction rule
//     (chain.EvictBefore). To produce the reference model's
//     outputs it applies the engine's event-time gate at batch boundaries
//     (records a follower stage would process before its leader's watermark
//     passes them wait for the next batch; IdleTimeout releases them), which
//     costs it almost nothing;
//   - microbatch_key (MicroBatchKeyOrder): the same with per-key instead of
//     per-partition order, to show how much of the gap is key parallelism.
//
// The cap W is the same for both: every stage's processor is wrapped so
// that it takes a slot of one semaphore of size W (per run, shared by all
// partitions and stages) around the simulated cost and the processor. The
// cost is a timer wait (I/O-like: no CPU) of the record's header value.
//
// Workloads: A, I/O-bound and skewed — Zipf users (s=1.1) over 10,000 keys,
// half of the journeys on users of 2 hot partitions, log-normal costs with
// median CostMedian (1ms) and p99/p50 = 50; B, the same input with no cost
// (attribution logic only); C, A over P × W in {4, 16, 64}² (Quick: the
// diagonal). B also measures the ceilings: a plain sarama consumer group
// reading every partition and doing nothing ("raw"), the one-stage no-op
// chain (a cheap decoder, no store, no producer) on a larger input of the
// same shape (3 runs each, alternating, median), and the polling fallback:
// the chain with a PollingBufferSize-record handoff buffer, whose followers
// fall out of the buffer and poll Kafka themselves. With Options.Velocity,
// B's throughput phase also runs the chain with the attribution chain's
// velocity stage after the plain chain in every repeat, checked like the
// others (alerts included), and reports its throughput ratio and added CPU
// and elapsed time per record (velocity.go).
//
// # How it measures
//
// Throughput phase (the input is in the topic before the design starts):
//
//	throughput  = records ÷ (time the last record is complete − time the first is consumed)
//
// where consumed = the design's first Decode call, and a record is complete
// when every stage has processed or skipped it and its outputs (and dead
// letter) are acknowledged by Kafka: for the chain, when the last stage's
// position (chain.Observer.Advanced) passes it (positions move only over
// completed records, DESIGN I1 and I5); for the micro-batch, when its batch's
// acknowledgements are in (before that batch's checkpoint and commit).
//
//	cpu_s        = process user+system CPU time (getrusage) from the design's start to its completion
//	peak_heap_mb = max of runtime/metrics /gc/heap/live:bytes, sampled every 20ms
//	               (peak_heap_alloc_mb: /memory/classes/heap/objects:bytes)
//
// Both include everything in the process — with the embedded broker, the
// broker and the topics it holds; the comparison is between designs on the
// same broker.
//
//	bound.time  = max(total cost ÷ W, longest key×stage chain)
//	efficiency  = bound.time ÷ measured time  (= throughput ÷ records/bound.time)
//
// computed from the workload's own cost draws over the records a processor
// runs for (valid, not duplicates, per reference.Run). The longest
// key×stage chain is the largest sum of costs of one key within one stage:
// those records must run one after another in any correct design (same key,
// same stage, read-modify-write of the same state). A key's stages may
// overlap, so its all-stage sum (bound.longest_key) is not a bound.
// bound.chain_order_path is the critical path under the chain's own rules
// (a follower begins offset o only when its leader has completed every
// offset below it and its watermark passed t+Lateness, or it is idle; one
// key's records of a stage in order), with unlimited workers and no
// overhead; bound.key_order_path is the same under the key-scoped gate (a
// follower record of key u waits only for its leader's records of u at
// offsets ≤ o and, when processed, below q(t+Lateness); it lies between
// the longest key×stage chain and chain_order_path). efficiency_chain_order
// = max(total cost ÷ W, the path of the run's own gate scope) ÷ measured
// time separates what the ordering rules cost from engine overhead.
// wait_overshoot is how much longer the timers waited than the costs asked
// (the runtime's timer granularity, ~1ms on a busy machine).
//
// Latency phase: the same input is fed to a fresh, empty topic per design:
// its first fifth at once (consumed as a backlog and not measured — the
// log's start is mostly clicks of journeys whose installs come later), then,
// once the design has completed those, the following records open loop (a
// schedule that never waits for the consumer) at LatencyLoad (0.5) × the
// slower design's measured throughput, for LatencyDuration and then up to
// one more second that is not measured (a log's last records wait for the
// idle release; a stream never ends).
//
//	latency = time Kafka acknowledged the output − time its input was handed to the producer
//
// for every output of a measured input, the output found by its source
// header (attribution.SourceHeader) in the producer's done callback (one
// wrapper, ackProducer, for both designs). The input's Kafka timestamp is
// not used because it carries the workload's event-time semantics.
// floor_p50_ms/floor_p99_ms are the least latencies the event-time gate
// allows at that load (waiting for a later event time on the partition, or
// IdleTimeout of silence), plus the record's cost: neither design can go
// below them, in either gate scope (the key scope still waits until a later
// event time is read). The table "latency p99 beside the event-time floor"
// sets every design's p99 beside them, per point.
//
// # Correctness (every run, both phases)
//
// Each design's output and dead-letter topics are read back and compared
// with reference.Run over each partition's log by reference.Check (no
// duplicates accepted, key order): every output is identified
// by its source header; one that appears twice is a duplicate, one that is
// absent is lost, one with other bytes is changed; every key's outputs of a
// stage must be in offset order; the dead letters must be exactly the
// invalid records with their original key and value. Any difference fails
// Run with ErrIncorrect (the CLI exits non-zero). Two designs that each
// equal the reference equal each other. In the latency phase a partition
// may pause longer than IdleTimeout while input arrives live; both designs
// then release the gate (DESIGN §5: idle release trades completeness for
// progress), so content differences there are reported, not failed; loss,
// duplication and order are checked as everywhere. The raw consumer checks
// that every offset arrives once, in order.
//
// # Reproducing
//
// Same seed, options and Go release give the same input and the same
// bounds. Times depend on the machine: the report prints the broker, Go
// release, CPUs and every option; CPU contention from other processes shows
// as lower throughput and larger wait_overshoot. IdleTimeout defaults to
// 100ms (the engine's own default is 1s) for both designs, so the end of a
// finite input does not dominate short runs; it also bounds the latency at
// low per-partition rates.
//
// # Heavy keys (HeavyKey)
//
// HeavyKey measures the state's cost per record when one key (the all-zeros
// advertising ID, workload.HeavyKey) has a large share of its partition and
// thousands of events inside the windows: no broker, the records of a
// workload.DefaultConfig workload with HeavyKeyShare go through the three
// stages' Sequence and Process on one thread locked to its OS thread, each
// partition's stages as the partition-scope gate lets them go, with a
// store.DB and a checkpoint (eviction included) every CommitEvery records.
// A record's cost is the thread's CPU clock around its stage work; the
// report gives mean, p50 and p99 per record type for the heavy key, the
// other keys of its partition and the other partitions, the heavy key's
// ratio to its partition's other keys, and checks the heavy partition's
// outputs and final state against reference.Run (ErrIncorrect otherwise).
// `differential heavykey` prints it.
//
// # Concurrency
//
// Run may be called concurrently: runs share nothing, and every topic and
// group name is unique per run, so they may also share a real cluster (the
// measurements then disturb each other). Everything Run starts has stopped,
// and its topics are deleted, when it returns.
package bench
