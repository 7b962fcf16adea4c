// Package embedded runs an in-process, Kafka-compatible cluster (franz-go's kfake) for the
// integration tests, the CLI demo and the benchmarks, so none of them needs a JVM.
//
// It owns the cluster's listeners and the goroutines kfake starts for them, from Start until
// Close. The cluster speaks the Kafka protocol on 127.0.0.1, keeps everything in memory and
// supports what the engine uses: produce and fetch, consumer groups (classic protocol, with
// offsets and commit metadata), idempotent and transactional producers, read_committed
// reads, and topic administration. Its defaults follow scripts/kafka.sh's real broker where
// that matters to the engine: topics are not auto-created and CreateTopics without a
// partition count creates one partition. Unlike a real broker it has no initial rebalance
// delay and accepts group session timeouts down to 100 ms, so tests stay fast. With the SASL
// and TLS options it is a secured cluster (SASL PLAIN/SCRAM users, a TLS listener) for the
// tests of the clients' security settings.
//
// A Cluster is safe for concurrent use; Close may be called more than once.
package embedded
