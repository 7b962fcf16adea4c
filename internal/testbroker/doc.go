// Package testbroker gives every integration test a Kafka broker and a few deterministic
// helpers around it.
//
// New returns the real cluster named by the environment variable DIFFERENTIAL_TEST_BROKERS
// (comma-separated host:port, e.g. the one `bash scripts/kafka.sh start` runs on
// 127.0.0.1:9092) when it is set, and otherwise starts an in-process kfake cluster
// (package internal/embedded) that the test's Cleanup closes. Tests are written once and
// run against both; CI runs them against each.
//
// It is a thin layer over internal/cluster, which does the work without a testing.TB (the
// benchmark uses it directly; Broker.Cluster hands it to code that runs off the test's
// goroutine): this package adds the environment variable, the test clients' short waits
// (Config), names made from the test's name, and helpers that fail the test.
//
// What it owns: the embedded cluster of a test (if any) and the topics made by Topic, which
// are deleted at cleanup on a real broker. Every topic name is unique per test and per run,
// so tests may run in parallel and repeatedly against one long-lived broker.
//
// Guarantees: the helpers never sleep to wait for a condition. Produce returns when the
// broker acknowledged every record (acks=all). ReadAll reads each partition from its log
// start to the end offset that its first fetch reports (the high watermark, or the last
// stable offset for read_committed) and returns; it never waits for records that are not
// there. Topic returns once the broker serves metadata with a leader for every partition.
//
// Concurrency: a Broker may be used from several goroutines, but the helpers that take a
// testing.TB fail the test with t.Fatal and so must be called from the test's goroutine.
package testbroker
