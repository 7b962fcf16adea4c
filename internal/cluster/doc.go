// Package cluster is the Kafka cluster that the integration tests and the
// benchmark run against, usable without a testing.TB (internal/testbroker
// wraps it for tests): a real cluster named by its bootstrap addresses, or
// an embedded, in-process one (internal/embedded) that Open starts and
// Close stops.
//
// It owns the embedded cluster (if any) and the topics CreateTopic made and
// DeleteTopics has not deleted yet: Close deletes those on a real cluster
// (an embedded one takes them with it). Around the cluster it gives the one
// sarama configuration of the project's test and benchmark clients
// (Config, adjusted per user by Open's tune), names unique to a process run
// (Name), synchronous produce (Produce), and reading a topic back
// (ReadAll).
//
// Guarantees: nothing sleeps to wait for a condition except AwaitLeaders'
// bounded polling inside CreateTopic (a real broker answers CreateTopics
// before every broker serves the topic, and sends no notification).
// CreateTopic returns once every partition has a leader; Produce returns
// once the broker acknowledged every record (acks=all); ReadAll reads each
// partition from its log start to the end offset its first fetch reports
// and never waits for records that are not there.
//
// Concurrency: a Cluster is safe for concurrent use; Name is too.
package cluster
