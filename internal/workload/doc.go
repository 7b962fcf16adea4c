// Package workload generates deterministic attribution workloads (DESIGN
// DESIGN.md "Attribution rules" input) from a seed, for tests and benchmarks: Kafka records (key =
// user_id, JSON value, timestamp, partition by sarama's default hash
// partitioner, offsets per partition in production order) with the edge
// cases the attribution rules care about, and a per-record processing-cost
// draw for benchmarks.
//
// It owns no engine behaviour; the same Config always yields the same
// records (for a given Go release: math/rand/v2's PCG and its derived
// distributions).
//
// Writer (Write for a whole slice) is the one producer of generated
// records, for the CLI's produce and demo, the benchmark's feeder and the
// end-to-end tests: each record goes to its planned partition (the manual
// partitioner) in order, with its timestamp, through an idempotent producer
// with acks=all, so retries neither duplicate nor reorder; with Exact (a
// fresh topic) every record must land at its planned offset, so the topic
// is exactly Split of the records. Send and Close are called from one
// goroutine; Progress is called from the writer's own.
package workload
