// Package kadmin holds small Kafka administration helpers shared by the
// test broker helper and the benchmark harness. It owns no state.
package kadmin

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// NewTopic is the TopicDetail the project's tools create topics with:
// the given partition count, the broker's replication factor, and no
// retention limit. Kafka deletes a segment once its newest record
// timestamp is older than retention.ms (7 days by default), and the
// generated workloads carry event times weeks in the past: with the
// default, a broker's periodic retention check can delete an input topic's
// head in the middle of a test or a benchmark.
func NewTopic(partitions int32) *sarama.TopicDetail {
	unlimited := "-1"
	return &sarama.TopicDetail{
		NumPartitions:     partitions,
		ReplicationFactor: -1,
		ConfigEntries:     map[string]*string{"retention.ms": &unlimited, "retention.bytes": &unlimited},
	}
}

// AwaitLeaders waits until a fresh client sees a leader for every one of
// the topic's partitions. A real broker answers CreateTopics before every
// broker serves the topic, and there is no notification for that, so this
// polls with a short backoff until timeout.
func AwaitLeaders(addrs []string, cfg *sarama.Config, topic string, partitions int32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := CheckLeaders(addrs, cfg, topic, partitions)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: no leader for every partition after %s: %w", topic, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CheckLeaders reports whether a fresh client sees exactly partitions
// partitions of topic, each with a leader. cfg is copied, not modified.
func CheckLeaders(addrs []string, cfg *sarama.Config, topic string, partitions int32) error {
	c := *cfg
	c.Metadata.Retry.Max = 0
	client, err := sarama.NewClient(addrs, &c)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	if err := client.RefreshMetadata(topic); err != nil {
		return err
	}
	ps, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	if int32(len(ps)) != partitions {
		return fmt.Errorf("metadata lists %d of %d partitions", len(ps), partitions)
	}
	for _, p := range ps {
		if _, err := client.Leader(topic, p); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
