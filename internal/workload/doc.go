// Package workload generates deterministic attribution workloads (DESIGN
// §5 input) from a seed, for tests and benchmarks: Kafka records (key =
// user_id, JSON value, timestamp, partition by sarama's default hash
// partitioner, offsets per partition in production order) with the edge
// cases the attribution rules care about, and a per-record processing-cost
// draw for benchmarks.
//
// It owns no engine behaviour; the same Config always yields the same
// records (for a given Go release: math/rand/v2's PCG and its derived
// distributions).
package workload
