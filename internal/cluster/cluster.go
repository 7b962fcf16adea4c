package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/kfetch"
)

// Version is the protocol version Config sets. kfake and Kafka 4.x both
// pass the package tests with every sarama version from 2.8 to 4.3; 3.0 is
// well above Kafka 4's protocol floor (2.1, KIP-896) and has everything the
// engine uses (KIP-447 transactional offset commits included).
var Version = sarama.V3_0_0_0

// Cluster is a Kafka cluster and the topics made on it.
type Cluster struct {
	addrs    []string
	embedded *embedded.Cluster // nil on a real cluster
	tune     func(*sarama.Config)

	mu     sync.Mutex
	topics []string // created and not yet deleted
}

// Open returns the real cluster at brokers or, when brokers is empty,
// starts an embedded one. tune, if not nil, adjusts every configuration
// Config returns (client id, fetch waits, group timings).
func Open(brokers []string, tune func(*sarama.Config)) (*Cluster, error) {
	c := &Cluster{tune: tune}
	if len(brokers) > 0 {
		c.addrs = slices.Clone(brokers)
		return c, nil
	}
	e, err := embedded.Start()
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded broker: %w", err)
	}
	c.embedded, c.addrs = e, e.Addrs()
	return c, nil
}

// Close deletes, on a real cluster, the topics CreateTopic made that are
// not deleted yet, and stops an embedded cluster. Errors deleting topics
// are returned joined; Close still stops what it owns.
func (c *Cluster) Close() error {
	c.mu.Lock()
	left := c.topics
	c.topics = nil
	c.mu.Unlock()
	var err error
	if c.Real() && len(left) > 0 {
		err = c.DeleteTopics(left...)
	}
	if c.embedded != nil {
		c.embedded.Close()
	}
	return err
}

// Addrs returns the bootstrap addresses.
func (c *Cluster) Addrs() []string { return slices.Clone(c.addrs) }

// Real reports whether this is a real Kafka cluster rather than the embedded one.
func (c *Cluster) Real() bool { return c.embedded == nil }

// Embedded returns the in-process cluster, for tests that inject faults; nil when Real.
func (c *Cluster) Embedded() *embedded.Cluster { return c.embedded }

// Config returns a fresh sarama configuration: protocol Version (accepted
// by kfake and by Kafka 4), a 5 s dial timeout, short metadata and produce
// retry backoffs (50 ms), acks=all with Successes returned, consumers that
// start at the oldest offset and return errors; then Open's tune. Callers
// may change the copy freely.
func (c *Cluster) Config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "differential"
	cfg.Version = Version
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	if c.tune != nil {
		c.tune(cfg)
	}
	return cfg
}

var seq atomic.Int64

// runID keeps names unique across runs against one long-lived real broker.
var runID = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)

// Name returns a name unique to this process run: base, a run id, a
// sequence number, and "-"+suffix when suffix is not empty. Use it for
// topics, groups and transactional ids.
func Name(base, suffix string) string {
	name := fmt.Sprintf("%s-%s-%d", base, runID, seq.Add(1))
	if suffix != "" {
		name += "-" + suffix
	}
	return name
}

// CreateTopic creates topic with the given partition count (replication
// factor: the broker's default; no retention limit, see kadmin.NewTopic)
// and returns once every partition has a leader (at most 30 s).
func (c *Cluster) CreateTopic(topic string, partitions int32) error {
	admin, err := sarama.NewClusterAdmin(c.addrs, c.Config())
	if err != nil {
		return fmt.Errorf("cluster: admin: %w", err)
	}
	defer closeQuietly(admin)
	if err := admin.CreateTopic(topic, kadmin.NewTopic(partitions), false); err != nil {
		return fmt.Errorf("cluster: create topic %s: %w", topic, err)
	}
	c.mu.Lock()
	c.topics = append(c.topics, topic)
	c.mu.Unlock()
	if err := kadmin.AwaitLeaders(c.addrs, c.Config(), topic, partitions, 30*time.Second); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// DeleteTopics deletes topics; one that does not exist is not an error.
func (c *Cluster) DeleteTopics(topics ...string) error {
	c.mu.Lock()
	c.topics = slices.DeleteFunc(c.topics, func(t string) bool { return slices.Contains(topics, t) })
	c.mu.Unlock()
	admin, err := sarama.NewClusterAdmin(c.addrs, c.Config())
	if err != nil {
		return fmt.Errorf("cluster: delete topics %v: %w", topics, err)
	}
	defer closeQuietly(admin)
	var errs []error
	for _, t := range topics {
		if err := admin.DeleteTopic(t); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("cluster: delete topic %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// Produce sends msgs to topic with a synchronous producer (acks=all) and
// returns once each is acknowledged, or the first error. It sets each
// message's Topic; on return each message's Partition and Offset say where
// it was written.
func (c *Cluster) Produce(topic string, msgs ...*sarama.ProducerMessage) error {
	p, err := sarama.NewSyncProducer(c.addrs, c.Config())
	if err != nil {
		return fmt.Errorf("cluster: producer: %w", err)
	}
	defer closeQuietly(p)
	for _, m := range msgs {
		m.Topic = topic
	}
	if err := p.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			err = fmt.Errorf("%w (first: %w)", err, perrs[0].Err)
		}
		return fmt.Errorf("cluster: produce to %s: %w", topic, err)
	}
	return nil
}

// ReadAll returns every record of every partition of topic, by partition,
// in offset order: from the log start to the end offset that the first
// fetch of the partition reports (the high watermark; for readCommitted the
// last stable offset, with aborted records left out). Control records are
// never returned (kfetch.ReadTopic).
func (c *Cluster) ReadAll(topic string, readCommitted bool) (map[int32][]*sarama.ConsumerMessage, error) {
	client, err := sarama.NewClient(c.addrs, c.Config())
	if err != nil {
		return nil, fmt.Errorf("cluster: read %s: %w", topic, err)
	}
	defer closeQuietly(client)
	return kfetch.ReadTopic(context.Background(), client, topic, readCommitted)
}

// WaitStable waits, at most timeout, until no partition of topic has an
// open transaction (kfetch.WaitStable).
func (c *Cluster) WaitStable(topic string, timeout time.Duration) error {
	client, err := sarama.NewClient(c.addrs, c.Config())
	if err != nil {
		return fmt.Errorf("cluster: wait for %s to be stable: %w", topic, err)
	}
	defer closeQuietly(client)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := kfetch.WaitStable(ctx, client, topic); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

func closeQuietly(c interface{ Close() error }) { _ = c.Close() }
