// Package bench measures the chain engine against two micro-batch
// baselines on the same broker, input, processors, decoder, state store,
// producer and worker cap, in steady state, and checks in every reported
// run that each design produces exactly what the reference model
// prescribes. The CLI's `differential bench` calls Run and prints
// Report.WriteTable; its flags map one to one to Options.
//
// # The designs
//
//   - chain: attribution.NewChainWith through kafka.Run (its own sarama
//     clients: the commits go in the background on a client of their own),
//     every stage with KeyConcurrency = W and its workers capped at W
//     chain-wide (chain.WithWorkerCap, as the micro-batch's pool of W
//     workers: the slots go to the keys with the most records ready, not
//     first come, first served at the limiter), checkpoints and commits every
//     CommitInterval per partition, the store (Pebble in a fresh directory,
//     or memory), kafka.NewProducer, output and dead-letter topics of its
//     own, a fresh consumer group. Each chain variant (chainVariant) is a row
//     of its own; the first is the headline's. The gate scope (issue #13)
//     is one: A and C measure the chain under Options.Gate (key by
//     default: the headline) and, unless OneGate, under the other scope,
//     each against its own ordering bound (Bound.KeyOrderTime or
//     ChainOrderTime). The targets of issue #13 stand against DESIGN §6,
//     as set; against the strongest micro-batch, issue #18's restate them.
//   - the strongest micro-batch (microbatch_strongest, the headline's
//     baseline): package bench/microbatch with per-key order (Sequence in
//     offset order per partition, then each key's records as one task), no
//     linger (a poll returns what has arrived, as Kafka's poll does), all
//     partitions' checkpoints of a batch in one synced Pebble batch
//     (store.CheckpointAll), its commits in the background on a client of
//     its own (as the chain's), and the batch size of its best run in a
//     sweep over SweepBatchSizes made in the same run (workloads A and B;
//     C uses A's choice).
//   - DESIGN §6's micro-batch (microbatch_design6, the design the engine
//     replaces, as the seeds compared it): per-partition order, BatchSize
//     (500, Kafka's max.poll.records default) records or BatchLinger
//     (100ms), one checkpoint (one sync) per partition after another, the
//     commit synchronous on the consumer group's client.
//
// Both micro-batches (package bench/microbatch): a sarama consumer group
// polls up to the batch size, round-robin across partitions; then for each
// stage in chain order a pool of W workers processes the batch's records of
// that stage and waits; it waits for the outputs' acknowledgements,
// checkpoints the state and commits. Same processors, decoder, store type,
// producer, dead letters (chain.DeadLetter), retry policy
// (chain.RetryPolicy) and eviction rule (chain.EvictBefore). To produce the
// reference model's outputs it applies the engine's event-time gate at
// batch boundaries (records a follower stage would process before its
// leader's watermark passes them wait for the next batch; IdleTimeout
// releases them).
//
// The cap W is the same for all: every stage's processor is wrapped so that
// it takes a slot of one semaphore of size W (per run, shared by all
// partitions and stages) around the simulated cost and the processor. The
// cost is a timer wait (I/O-like: no CPU) of the record's header value
// (CostHeader).
//
// Workloads: A, I/O-bound and skewed — Zipf users (s=1.1) over 10,000 keys,
// half of the journeys on users of 2 hot partitions, log-normal costs with
// median CostMedian (1ms) and p99/p50 = 50; B, the same stream with no cost
// (attribution logic only); C, A over P × W in {4, 16, 64}² (Quick: P=W=16).
// B also measures the ceilings: a plain sarama consumer group reading every
// partition and doing nothing ("raw"), the one-stage no-op chain (a cheap
// decoder, no store, no producer), on one input of 300,000 records (or
// the whole stream if shorter; ten pairs run back to back, the order
// alternating, the ratio the median of the balanced ratios, each the
// geometric mean of two consecutive pairs', one of either order, which
// cancels an advantage of a pair's first or second pass; they keep no state, so
// the steady-state rule below is for the designs). With
// Options.CeilingCommand (the CLI sets it) each pass runs in a fresh child
// process (ceiling.go: ServeCeiling reads a CeilingSpec on stdin and writes
// the DesignResult on stdout; the embedded broker stays in Run's process,
// reached over TCP): a pass lasts about a third of a second, and in Run's
// process it would share a heap of hundreds of MB that is not the design's
// (stream, reference model, embedded broker) — a GC cycle of it fell in
// nearly every pass, its marking taking CPU and turning on the write
// barriers the chain's copies pay — which a deployed consumer does not
// hold. The same pairs then also run in Run's process, reported beside them
// (WorkloadResult.CeilingMethod, NoopRawPairsInProcess); the children's CPU
// and heap are their own (DesignResult.OwnProcess). A child still running
// after Timeout (plus a grace) or when the context ends is killed (on
// Linux also when Run's process dies). Without
// CeilingCommand (Go tests and benchmarks) the passes run in Run's process.
// And the polling fallback:
// the chain with a PollingBufferSize-record handoff buffer, whose followers
// fall out of the buffer and poll Kafka themselves, on the chain's input
// (the median chain run's prefix, so the ratio compares the same records).
// With Options.Velocity,
// B's throughput phase also runs the chain with the attribution chain's
// velocity stage after the plain chain in every repeat, on the plain
// chain's input, checked like the others (alerts included), and reports
// its throughput ratio and added CPU and elapsed time per record
// (velocity.go).
//
// # Steady state: inputs sized by time
//
// Each point's input is a stream (stream.go): internal/workload generates
// a log whose event-time span grows with its record count (50,000 records
// per 21 days, so a user's state within the 7-day lookback does not grow
// with the input), and the records with timestamps in [Start+10d,
// Start+Span−10d) are kept, each partition's offsets renumbered from 0:
// the raw log's start is nearly all clicks (of journeys whose installs
// come later) and its end nearly all purchases, the kept part has the same
// mix all along. So every prefix of the stream is the same workload, only
// longer.
//
// Every design run (each chain variant, each baseline, each sweep size)
// consumes a prefix of the stream, written to a topic of its own, sized by
// its own throughput:
//
//	records = ladder(throughput × Duration × 1.25 + batch size)
//
// where ladder rounds up to 1000·√2^k (runs of similar speed share an
// input) and the first guess comes from the chain's throughput (the chain's
// own from W ÷ mean cost, or 40,000 rec/s without costs). A run shorter
// than Duration, or a chain run whose busiest partition paid fewer than 10
// checkpoints or with fewer than 10 commits acknowledged, only sizes the next run (at least one ladder step longer; it
// is neither reported nor checked). Duration defaults to 12.5 ×
// CommitInterval and must be at least 10 × CommitInterval; CommitInterval
// is 200ms (the engine's default is 1s: a shorter interval costs the chain
// more checkpoints, not fewer), so every chain run pays at least ten
// checkpoints and commits of every partition that is busy throughout. The
// report gives, for every run, the synced checkpoint writes (the chain's:
// one per partition and interval; DESIGN §6's: one per partition and
// batch; the strongest's: one per batch), the busiest partition's
// checkpoints and the acknowledged commits, all counted inside the
// measured window. With Options.Records every run has that many records
// instead, and shorter runs are reported as not steady.
//
// # How it measures
//
// Throughput (the input is in the topic before the design starts):
//
//	throughput  = records ÷ (time the last record is complete − time the first is consumed)
//
// where consumed = the design's first Decode call (the consumer group's
// join is before it), and a record is complete when every stage has
// processed or skipped it and its outputs (and dead letter) are
// acknowledged by Kafka: for the chain, when the last stage's position
// (chain.Observer.Advanced) passes it (positions move only over completed
// records, DESIGN I1 and I5); for a micro-batch, when its batch's
// acknowledgements are in (before that batch's checkpoint and commit).
// That span is the measured window. The hot partitions finish last, so
// this is the rate of a stream with the input's partition mix.
//
//	cpu_s        = process user+system CPU time (getrusage) from the design's start to its completion
//	peak_heap_mb = max of runtime/metrics /gc/heap/live:bytes, sampled every 20ms
//	               (peak_heap_alloc_mb: /memory/classes/heap/objects:bytes)
//
// Both include everything in the process — with the embedded broker, the
// broker and the topics it holds; the comparison is between designs on the
// same broker.
//
// # Bounds and the limit
//
// Computed from each input's own cost draws over the records a processor
// runs for (valid, not duplicates, per reference.Run):
//
//	pipelined bound  = max(total cost ÷ W, longest key×stage chain)
//	chain-order      = max(total cost ÷ W, critical path under the chain's rules)
//	micro-batch(n)   = Σ over batches of n Σ over stages max(stage cost ÷ W, longest task)
//	efficiency       = bound ÷ measured time
//
// The longest key×stage chain is the largest sum of costs of one key within
// one stage: those records must run one after another in any correct design
// (same key, same stage, read-modify-write of the same state); a key's
// stages may overlap, so its all-stage sum (bound.longest_key) is not a
// bound. The critical path under the chain's rules (Bound.ChainOrderPath)
// lets a follower begin offset o only when its leader has completed every
// offset below it and its watermark passed t+Lateness, or it is idle; one
// key's records of a stage in order; unlimited workers, no overhead;
// Bound.KeyOrderPath is the same under the key-scoped gate (a follower
// record of key u waits only for its leader's records of u at offsets ≤ o
// and, when processed, below q(t+Lateness); it lies between the longest
// key×stage chain and ChainOrderPath). A chain run's "of own bound" is
// against the path of its own gate scope. The micro-batch bound (stagedTime) takes batches of n round-robin across the
// partitions with records left, as the baseline's poll does on a backlog;
// a task is one key's records of the stage (key order) or one partition's
// (DESIGN §6); a stage begins when the batch's previous stage ended, a
// batch when the previous batch ended; it ignores the few records the gate
// holds for the next batch. n = 0 is one batch of everything: no batch
// barrier left, the stages still one after another.
//
// Each run reports "efficiency" (of the pipelined bound, which any correct
// design is under) and "of own bound" (the chain: chain-order; a
// micro-batch: micro-batch(n) with its order). The limit, on the chain's
// input: if both reached their bounds, the chain would win
//
//	max win           = pipelined rate ÷ micro-batch(n*, key order) rate
//	max win any batch = pipelined rate ÷ micro-batch(0, key order) rate
//
// against the strongest (batch n*) and against a key-parallel micro-batch
// of any batch size: what is left to win against a key-parallel
// micro-batch with large batches is pipelining across stages and no
// per-batch barrier. wait_overshoot is how much longer the cost timers
// waited than asked (the runtime's timer granularity; more on a busy
// machine). Each run with costs also notes where the time of the input's
// longest key×stage chain went (chainTimes; the pipelined bound when that
// chain sets it): its cost, what its timers waited, its waits for a slot
// of W, the gaps between its records (the engine's part: the next record
// not yet read, released or taken by a worker) and when it started and
// ended in the run. On Linux the Go runtime's timers sleep in whole
// milliseconds when a processor is idle (epoll_wait's timeout), so a short
// cost waits up to about a millisecond longer: the chain of a hot key,
// hundreds of records, carries that overshoot on the critical path.
//
// # Cost waits
//
// Options.CostWait says how every simulated cost waits, the same for every
// design (the chain, its variants and both micro-batches): "timer", a Go
// timer alone, or "kick" (the default on Linux; refused elsewhere), a Go
// timer plus one timerfd shared by the process (costwait_linux.go). The
// timerfd (CLOCK_MONOTONIC, non-blocking) is registered with the
// runtime's network poller by os.NewFile and never read: it is armed, with
// an absolute expiry, to the earliest pending deadline rounded up to a
// 50µs grid (coarsened by doubling, up to 800µs, while the kicks are seen
// late: a machine short of CPU), and its expiry wakes the poller's
// epoll_wait, after which the
// runtime runs the timers that are due. A kick is never earlier than the
// timer it wakes (the deadline is taken after the timer is created, and
// rounded up), so a cost is never shorter than asked; the wait returns
// when the Go timer fires, or with its context. A waiter re-arms the fd
// when it adds an earlier deadline, or when it leaves as the earliest and
// the next pending cell differs (disarming it when none is left and its
// expiry is ahead): N concurrent waiters share one fd and about one
// timerfd_settime per distinct grid cell (BenchmarkCostWait reports arms,
// CPU and context switches per wait). The precision costs CPU: each kick
// is a wake-up of an idle runtime thread, where a millisecond-granular
// poller wakes once for all the timers of that millisecond. The report
// and the JSON (cost_wait) say which was used.
//
// # The sweep
//
// The strongest micro-batch runs once per size in SweepBatchSizes (500,
// 2000, 8000, 32000), in order, each sized by time like every run; a size
// whose one batch would last longer than 2 × Duration at the best
// throughput so far is skipped and reported as such (its batches would
// hold a run of one or two batches, and its latency would be seconds; the
// micro-batch(0) bound says what any larger size could reach at most). The
// best run is the strongest micro-batch.
//
// # Latency
//
// One latency phase per comparison (the chain and the strongest, the chain
// and DESIGN §6): a prefix of the stream is fed to a fresh, empty topic per
// design: one second's worth at once (consumed as a backlog and not
// measured: the designs start up), then, once the design has completed
// those, the following records open loop (a schedule that never waits for
// the consumer) at LatencyLoad (0.5) × the slower design's throughput of
// that comparison, for LatencyDuration and then up to one more second that
// is not measured (a log's last records wait for the idle release; a
// stream never ends).
//
//	latency = time Kafka acknowledged the output − time its input was handed to the producer
//
// for every output of a measured input, the output found by its source
// header (attribution.SourceHeader) in the producer's done callback (one
// wrapper, ackProducer, for all designs). The input's Kafka timestamp is
// not used because it carries the workload's event-time semantics.
//
// # The event-time floor (issue #13)
//
// The latency target is set against the floor the rules impose: the least
// latency any engine obeying DESIGN §3's gate can have on the run's own
// arrival times (feeder.sentAt) and cost draws. cascadeDone computes, for
// every record of a partition and every stage, the earliest completion
// with unlimited workers and no overhead: stage 0 begins a click on
// arrival once its key's previous click completed; stage k ≥ 1 begins a
// record once it arrived and its gate is open — the leader (stage k−1) has
// completed every record (partition scope) or every record of its key
// (key scope) at offsets ≤ o+OffsetDistance and, for a record the stage
// processes, below q(t+Lateness), whose record must have arrived — or the
// leader is idle (the partition quiet for IdleTimeout after the last
// record, and the leader done with everything that arrived); one key's
// records of a stage run in offset order, each for its cost. The output's
// floor is its stage's completion − its input's send time, like the
// latency without the produce path. rules_floor_p50_ms/rules_floor_p99_ms
// are its quantiles under the run's gate scope (rules_floor_gate), and
// the #13 target is chain p99 ÷ rules_floor_p99_ms. It is a lower bound:
// every term is a rule (a record cannot be begun before it arrives, before
// its gate opens, or before its key's earlier record of the stage ends,
// and takes its cost); duplicates and invalid records are treated as
// skipped, the idle release as early as the rule allows, which can only
// lower it. It cascades: the follower's gate waits for its leader's
// completion, and the leader is gated too, so a purchase (t, user u)
// waits for an install of u below q(t+Lateness) whose event time is later
// than t — that install waits for q(t_install+Lateness), a second lateness
// horizon — and for the clicks' and the install's costs.
//
// floor_p50_ms/floor_p99_ms, kept beside it, are the one-horizon floor
// the bench reported before (latencyFloors): the output's own gate only —
// the arrival of the record carrying stream time past t+Lateness, or
// IdleTimeout of silence — plus its own cost. It is below the rules' floor
// wherever a leader's own gate or costs hold the follower.
// admission_floor_p50_ms/admission_floor_p99_ms (key gate) add the
// admission step (chain/keygate.go), which at-least-once chains no longer
// have since issue #13 (they carry the offsets completed above each
// position instead; exactly-once mode keeps it): a follower begins records in
// offset order, each once its leader has *begun* every record up to
// o+OffsetDistance and, when it processes the record, up to q(t+Lateness)
// (so that a stop drains in bounded time, I6). That step is the engine's
// choice, not a rule of DESIGN §3 (which also allows carrying the offsets
// completed above the position instead); through it one user's install
// with a late event time holds every other user's purchases behind it.
// It is reported to tell the engine's cost from the rules', never as the
// target's floor. The chain's progress line prints all three and, for its
// slowest outputs, each floor.
//
// # Correctness (every reported run)
//
// Each design's output and dead-letter topics are read back and compared
// with reference.Run over each partition's log by reference.Check (no
// duplicates accepted, key order): every output is identified by its
// source header; one that appears twice is a duplicate, one that is absent
// is lost, one with other bytes is changed; every key's outputs of a stage
// must be in offset order; the dead letters must be exactly the invalid
// records with their original key and value. Any difference fails Run
// with ErrIncorrect (the CLI exits non-zero). Designs that each equal the
// reference equal each other. In the latency phase a partition may pause
// longer than IdleTimeout while input arrives live; every design then
// releases the gate (DESIGN §5: idle release trades completeness for
// progress), so content differences there are reported, not failed; loss,
// duplication and order are checked as everywhere. The raw consumer checks
// that every offset arrives once, in order. Sizing runs (shorter than
// Duration) are not reported and not checked.
//
// # Reproducing
//
// Same seed, options and Go release give the same stream and the same
// bounds; the prefixes depend on the measured throughputs. Times depend on
// the machine: the report prints the broker, Go release, CPUs and every
// option; CPU contention from other processes shows as lower throughput
// and larger wait_overshoot. IdleTimeout defaults to 100ms (the engine's
// own default is 1s) for all designs, so the end of an input does not
// dominate; it also bounds the latency at low per-partition rates. The
// workload's timestamps are in the past (from 2025-01-01, earlier for a
// stream that would reach today), so a real broker accepts them.
//
// # The exactly-once cost table (Options.EOSCost)
//
// `differential bench --eos-cost` measures, instead of the design
// comparison, what exactly-once costs (issue #12): for workloads B and A
// (Workloads; not C), at each of CommitIntervals (default 100ms, 1s, 5s)
// and in each of Guarantees (default at-least-once and exactly-once), the
// chain with Pebble state and a changelog — in both guarantees, as
// `differential run` by default, so that the difference is the
// transactions' alone — on a prefix of the point's stream sized by time
// like every run: at least max(Duration, 12.5 commit intervals), with ten
// or more checkpoints on the busiest partition and ten acknowledged
// commits (steady), else a longer prefix. Exactly-once runs get a
// kafka.Transactor (a fresh transactional id per run) in place of the
// producer; the changelog topic is per run and deleted after it. Each cell
// also has a latency run at LatencyLoad × the row's slower cell, fed for
// max(LatencyDuration, 3 intervals) and then max(1s, 1.5 intervals) more,
// not measured. An exactly-once output's latency ends when the
// transaction holding it committed (the Transactor's Commit returned: a
// read_committed reader can see it), an at-least-once output's when it was
// acknowledged. Every run is checked against the reference model, the
// exactly-once ones read read_committed (ErrIncorrect otherwise).
//
//	cost = 1 − exactly-once throughput ÷ at-least-once throughput
//
// per row; the target line checks issue #12's bar (≤ 10 % at 1 s, both
// runs steady). The gate is Options.Gate unless chain.New refuses
// exactly-once with it (asked of chain.New with stand-ins, so the table
// follows the engine): then both guarantees run the partition-scoped gate
// and the table and JSON (eos_cost.gate_note) say why. Each cell also
// times the commit path: the changelog appends (an at-least-once
// partition's run in the background; an exactly-once cycle's one partition
// after another while all are paused) and, exactly-once, per cycle the
// wall time from its first append to the end of its Commit
// (AddOffsetsToTxn, TxnOffsetCommit, EndTxn) — a part of the cycle's pause,
// whose drain before it is not visible outside the chain. It also gives
// the mean time from a send to its acknowledgement (a record completes,
// and the follower's gate moves past it, only then) and how busy the cap
// W was (DesignResult.SlotUse, and SlotsIdle: no slot held at all). The
// table ends with a markdown table of every cell (the README's).
// IdleTimeout defaults to 500ms here (at 100ms a fetch slower than that on
// a loaded machine with a real broker once released a gate early: a
// content difference, and the run failed) and Duration to 5s, so that the
// longer tail stays small.
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
