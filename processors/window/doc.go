// Package window provides rolling-window counters over event time for
// chain processors: Counter counts, per key of any string, the records of
// the last Window of event time, in the chain's state store, with bounded
// state per key. It is the "velocity" check of fraud and attribution
// pipelines (how many clicks did this device send in the last hour?) as a
// reusable piece; the attribution chain's velocity stage uses it.
//
// # The rule (exact at bucket granularity)
//
// Let W be Window, B Bucket (W is a multiple of B), L Lateness, and
// q(x) = ⌊x / B⌋·B the time x truncated to a multiple of B (Unix time).
// For the record at offset o of a partition, with counter key k, event time
// t, and stream time S = S(o) (Context.StreamTime: the largest event time of
// the valid records at offsets below o; zero when there is none),
// the record is late when S − t > L: it is not counted and Add returns 0.
// Otherwise it is counted, and Add returns
//
//	count(k, o) = #{ counted records r of key k at offsets ≤ o : q(t) − W < q(r.time) ≤ q(t) }
//
// which is ≥ 1 (the record counts itself).
//
// This is the rule "records of k at offsets ≤ o with time in (t − W, t]"
// applied to the truncated times: with B = 1ns it is that rule exactly; with
// a coarser B the window's two ends move to bucket boundaries — a record in
// t's own bucket counts even when its time is a little after t, and the
// oldest bucket counts whole or not at all. Records at larger offsets never
// count, whatever their time, so a result depends only on the log up to o
// (deterministic under any engine timing, restart or key-parallelism).
//
// Lateness is what bounds the state: a counted record has t ≥ S − L, so its
// window starts above q(S − L) − W and a bucket starting at b can no longer
// be counted once S ≥ b + W + L. Each Add drops such buckets of its key, and
// the key's state entry expires (chain.State's eviction) when its newest
// bucket does. One key therefore holds at most ⌊(W + L)/B⌋ + 1 buckets
// (MaxBuckets bounds (W + L)/B), whatever its history: an Add costs one
// state read and one write of at most that many buckets. Choose L for how
// far behind the stream time records of one key may arrive and still count;
// B for the precision (DefaultBucket gives about W/60).
//
// # State
//
// One entry per key, "w/<Name>/<key>" (Counter.StateKey), in the chain's
// store through Context.State(): its writes are tagged with the record and
// persisted atomically with the stage position that covers it (DESIGN I4),
// so a restart counts every record exactly once; it follows its partition
// wherever the store's state does. The entry holds the offset last counted
// (a retried Process returns the same count and does not count twice) and
// the key's buckets with their counts.
//
// # Using it
//
// Create one Counter per stage with New, and call Add from the stage's
// Process (or Sequence) for the records to count, with the ctx Process
// received. Records of one counter key must reach Add in offset order: count
// in one stage only, and under KeyConcurrency > 1 make the counter key a
// function of the Kafka key (records of one Kafka key are processed in
// offset order). Add detects a key counted at a larger offset than the
// current record and returns a Fatal error.
//
// # Metrics
//
// Stats and RegisterMetrics report records counted, late records, the
// keys with live state and their size. Keys and size are tracked in memory
// per partition run, by expiry, from the entries this process wrote; a
// partition's figures are dropped when its Process context ends (the
// engine ends it when the partition stops).
//
// # Concurrency
//
// A Counter is safe for concurrent use by the records of one stage across
// partitions and key-parallel workers (see "Using it" for the key rule).
package window
