// Package kadmin holds small Kafka administration helpers shared by the
// test broker helper, the benchmark harness, scripts/kafkactl and the
// fault-injection suite (internal/chaos): topic creation settings, waiting
// for leaders, and who leads a partition, coordinates a group, serves, or
// lags behind in replication. It owns no state; every call opens its own
// short-lived client.
package kadmin

import (
	"errors"
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

// ProbeConfig is a sarama configuration for short administrative requests
// against a cluster that may have a node down or paused: protocol 3.0,
// second-scale network timeouts (a SIGSTOPped broker accepts connections
// and never answers, so sarama's 30 s default would hold every probe), and
// no metadata retries (callers poll).
func ProbeConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "differential-kadmin"
	cfg.Version = sarama.V3_0_0_0
	cfg.Net.DialTimeout = time.Second
	cfg.Net.ReadTimeout = 3 * time.Second
	cfg.Net.WriteTimeout = 3 * time.Second
	cfg.Metadata.Retry.Max = 0
	return cfg
}

// Leader returns the node id of the leader of topic's partition, as a fresh
// client's metadata says.
func Leader(addrs []string, cfg *sarama.Config, topic string, partition int32) (int32, error) {
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	if err := client.RefreshMetadata(topic); err != nil {
		return 0, fmt.Errorf("metadata of topic %s: %w", topic, err)
	}
	b, err := client.Leader(topic, partition)
	if err != nil {
		return 0, fmt.Errorf("leader of %s/%d: %w", topic, partition, err)
	}
	return b.ID(), nil
}

// Coordinator returns the node id of the group coordinator of group
// (a FindCoordinator request of a fresh client). The first request for a
// group on a fresh cluster creates __consumer_offsets, which is not
// available at once, so it retries for a few seconds.
func Coordinator(addrs []string, cfg *sarama.Config, group string) (int32, error) {
	c := *cfg
	c.Metadata.Retry.Max = max(c.Metadata.Retry.Max, 20)
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	client, err := sarama.NewClient(addrs, &c)
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	b, err := client.Coordinator(group)
	if err != nil {
		return 0, fmt.Errorf("coordinator of group %s: %w", group, err)
	}
	return b.ID(), nil
}

// Serving returns nil when the broker at addr answers a metadata request of
// its own and lists itself, as node id, among the cluster's brokers: a KRaft
// broker lists only registered, unfenced brokers, so a restarted node lists
// itself once it has caught up with the cluster metadata and been unfenced.
func Serving(addr string, id int32, cfg *sarama.Config) error {
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	// An empty (not nil) topic list asks for the brokers only.
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, []string{}))
	if err != nil {
		return fmt.Errorf("metadata from %s: %w", addr, err)
	}
	for _, x := range resp.Brokers {
		if x.ID() == id {
			return nil
		}
	}
	return fmt.Errorf("node %d at %s does not list itself yet (%d broker(s) listed)", id, addr, len(resp.Brokers))
}

// UnderReplicated returns, as "topic/partition isr [..] of replicas [..]",
// every partition of every topic (internal ones included) whose in-sync
// replica set is smaller than its replica set, or that has no leader.
func UnderReplicated(addrs []string, cfg *sarama.Config) ([]string, error) {
	c := *cfg
	c.Metadata.Full = true
	client, err := sarama.NewClient(addrs, &c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Close() }()
	// A full metadata refresh covers every topic, internal ones too.
	if err := client.RefreshMetadata(); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	topics, err := client.Topics()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range topics {
		parts, err := client.Partitions(t)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", t, err))
			continue
		}
		for _, p := range parts {
			replicas, err1 := client.Replicas(t, p)
			isr, err2 := client.InSyncReplicas(t, p)
			_, err3 := client.Leader(t, p)
			err := errors.Join(err1, err2, err3)
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("%s/%d isr %v of replicas %v: %v", t, p, isr, replicas, err))
			case len(isr) < len(replicas):
				out = append(out, fmt.Sprintf("%s/%d isr %v of replicas %v", t, p, isr, replicas))
			}
		}
	}
	return out, nil
}
