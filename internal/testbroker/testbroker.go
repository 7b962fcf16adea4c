package testbroker

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/cluster"
	"github.com/differential-dev/differential/internal/embedded"
)

// EnvBrokers names the environment variable that points the tests at a real cluster.
const EnvBrokers = "DIFFERENTIAL_TEST_BROKERS"

// Broker is a cluster for one test: internal/cluster's, with helpers that fail the test.
type Broker struct {
	c *cluster.Cluster
}

// New returns the real cluster named by DIFFERENTIAL_TEST_BROKERS, or else starts an
// embedded one that is closed when the test and its subtests finish.
func New(t testing.TB) *Broker {
	t.Helper()
	var addrs []string
	for _, a := range strings.Split(os.Getenv(EnvBrokers), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	c, err := cluster.Open(addrs, tune)
	if err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("testbroker: %v", err)
		}
	})
	return &Broker{c: c}
}

// tune makes the clients of tests quick to react: a fetch blocks at most 50 ms, so closing
// a consumer is quick; group heartbeats every 100 ms, so members learn of a rebalance fast.
// The session timeout stays at 6 s, the smallest a stock broker accepts.
func tune(cfg *sarama.Config) {
	cfg.ClientID = "differential-test"
	cfg.Consumer.MaxWaitTime = 50 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Max = 50
}

// Cluster returns the cluster without the testing.TB helpers (for goroutines other than
// the test's, and for code shared with the benchmark).
func (b *Broker) Cluster() *cluster.Cluster { return b.c }

// Addrs returns the bootstrap addresses.
func (b *Broker) Addrs() []string { return b.c.Addrs() }

// Real reports whether this is a real Kafka cluster rather than the embedded one.
func (b *Broker) Real() bool { return b.c.Real() }

// Embedded returns the in-process cluster, for tests that inject faults; nil when Real.
func (b *Broker) Embedded() *embedded.Cluster { return b.c.Embedded() }

// Config returns a fresh sarama configuration for tests: cluster.Cluster.Config (protocol
// version 3.0, acks=all with Successes returned, consumers that start at the oldest offset
// and return errors) with short waits everywhere (a fetch blocks at most 50 ms; group
// heartbeats every 100 ms; session timeout 6 s). Callers may change the copy freely.
func (b *Broker) Config() *sarama.Config { return b.c.Config() }

var unsafeTopicChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// Name returns a name that is unique to the test and to this run, made of the test's name,
// a run id, a sequence number and the given suffix (cluster.Name). Use it for topics,
// groups and transactional ids.
func Name(t testing.TB, suffix string) string {
	base := unsafeTopicChars.ReplaceAllString(t.Name(), "-")
	if len(base) > 120 {
		base = base[:120]
	}
	return cluster.Name(base, suffix)
}

// Topic creates a topic with a unique name and the given partition count (replication
// factor: the broker's default; no retention limit, see kadmin.NewTopic) and returns its
// name once every partition has a leader. On a real broker the topic is deleted when the
// test finishes.
func (b *Broker) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := Name(t, "")
	if err := b.c.CreateTopic(name, partitions); err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	if b.Real() {
		t.Cleanup(func() {
			if err := b.c.DeleteTopics(name); err != nil {
				t.Logf("testbroker: %v", err)
			}
		})
	}
	return name
}

// Produce sends msgs to topic with a synchronous producer (acks=all) and fails the test if
// any is not acknowledged. It sets each message's Topic; on return each message's Partition
// and Offset say where it was written.
func (b *Broker) Produce(t testing.TB, topic string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	if err := b.c.Produce(topic, msgs...); err != nil {
		t.Fatalf("testbroker: %v", err)
	}
}

// WaitStable waits (at most a minute) until no partition of topic has an
// open transaction (cluster.WaitStable); call it before a read_committed
// ReadAll after an exactly-once run.
func (b *Broker) WaitStable(t testing.TB, topic string) {
	t.Helper()
	if err := b.c.WaitStable(topic, time.Minute); err != nil {
		t.Fatalf("testbroker: %v", err)
	}
}

// ReadAll returns every record of every partition of topic, by partition, in offset order:
// from the log start to the end offset that the first fetch of the partition reports (the
// high watermark; for readCommitted the last stable offset, with aborted records left out).
// Control records are never returned. It fails the test on any error.
func (b *Broker) ReadAll(t testing.TB, topic string, readCommitted bool) map[int32][]*sarama.ConsumerMessage {
	t.Helper()
	out, err := b.c.ReadAll(topic, readCommitted)
	if err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	return out
}
