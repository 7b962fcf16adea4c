package testbroker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/kfetch"
)

// EnvBrokers names the environment variable that points the tests at a real cluster.
const EnvBrokers = "DIFFERENTIAL_TEST_BROKERS"

// version is the protocol version Config sets. kfake and Kafka 4.x both pass the package
// tests with every sarama version from 2.8 to 4.3; 3.0 is well above Kafka 4's protocol
// floor (2.1, KIP-896) and has everything the engine uses (KIP-447 transactional offset
// commits included).
var version = sarama.V3_0_0_0

// Broker is a cluster for one test.
type Broker struct {
	addrs    []string
	embedded *embedded.Cluster // nil on a real cluster
}

// New returns the real cluster named by DIFFERENTIAL_TEST_BROKERS, or else starts an
// embedded one that is closed when the test and its subtests finish.
func New(t testing.TB) *Broker {
	t.Helper()
	if env := strings.TrimSpace(os.Getenv(EnvBrokers)); env != "" {
		var addrs []string
		for _, a := range strings.Split(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return &Broker{addrs: addrs}
	}
	c, err := embedded.Start()
	if err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	t.Cleanup(c.Close)
	return &Broker{addrs: c.Addrs(), embedded: c}
}

// Addrs returns the bootstrap addresses.
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Real reports whether this is a real Kafka cluster rather than the embedded one.
func (b *Broker) Real() bool { return b.embedded == nil }

// Embedded returns the in-process cluster, for tests that inject faults; nil when Real.
func (b *Broker) Embedded() *embedded.Cluster { return b.embedded }

// Config returns a fresh sarama configuration for tests: protocol version 3.0 (accepted by
// kfake and by Kafka 4), acks=all with Successes returned, consumers that start at the
// oldest offset and return errors, and short waits everywhere (a fetch blocks at most 50 ms,
// so closing a consumer is quick; group heartbeats every 100 ms, so members learn of a
// rebalance fast). The session timeout stays at 6 s, the smallest a stock broker accepts.
// Callers may change the copy freely.
func (b *Broker) Config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "differential-test"
	cfg.Version = version
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 50 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Max = 50
	return cfg
}

var topicSeq atomic.Int64

// runID keeps names unique across test runs against one long-lived real broker.
var runID = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)

var unsafeTopicChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// Name returns a name that is unique to the test and to this run, made of the test's name,
// the given suffix and a sequence number. Use it for topics, groups and transactional ids.
func Name(t testing.TB, suffix string) string {
	base := unsafeTopicChars.ReplaceAllString(t.Name(), "-")
	if len(base) > 120 {
		base = base[:120]
	}
	name := fmt.Sprintf("%s-%s-%d", base, runID, topicSeq.Add(1))
	if suffix != "" {
		name += "-" + suffix
	}
	return name
}

// Topic creates a topic with a unique name and the given partition count (replication
// factor: the broker's default; no retention limit, see kadmin.NewTopic) and returns its name once every partition has a leader.
// On a real broker the topic is deleted when the test finishes.
func (b *Broker) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := Name(t, "")
	admin, err := sarama.NewClusterAdmin(b.addrs, b.Config())
	if err != nil {
		t.Fatalf("testbroker: admin: %v", err)
	}
	defer closeQuietly(admin)
	if err := admin.CreateTopic(name, kadmin.NewTopic(partitions), false); err != nil {
		t.Fatalf("testbroker: create topic %s: %v", name, err)
	}
	if b.Real() {
		t.Cleanup(func() { b.deleteTopic(t, name) })
	}
	if err := kadmin.AwaitLeaders(b.addrs, b.Config(), name, partitions, 30*time.Second); err != nil {
		t.Fatalf("testbroker: topic %s: %v", name, err)
	}
	return name
}

func (b *Broker) deleteTopic(t testing.TB, name string) {
	admin, err := sarama.NewClusterAdmin(b.addrs, b.Config())
	if err != nil {
		t.Logf("testbroker: delete topic %s: %v", name, err)
		return
	}
	defer closeQuietly(admin)
	if err := admin.DeleteTopic(name); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Logf("testbroker: delete topic %s: %v", name, err)
	}
}

// Produce sends msgs to topic with a synchronous producer (acks=all) and fails the test if
// any is not acknowledged. It sets each message's Topic; on return each message's Partition
// and Offset say where it was written.
func (b *Broker) Produce(t testing.TB, topic string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	p, err := sarama.NewSyncProducer(b.addrs, b.Config())
	if err != nil {
		t.Fatalf("testbroker: producer: %v", err)
	}
	defer closeQuietly(p)
	for _, m := range msgs {
		m.Topic = topic
	}
	if err := p.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			err = fmt.Errorf("%w (first: %v)", err, perrs[0].Err)
		}
		t.Fatalf("testbroker: produce to %s: %v", topic, err)
	}
}

// ReadAll returns every record of every partition of topic, by partition, in offset order:
// from the log start to the end offset that the first fetch of the partition reports (the
// high watermark; for readCommitted the last stable offset, with aborted records left out).
// Control records are never returned. It fails the test on any error.
func (b *Broker) ReadAll(t testing.TB, topic string, readCommitted bool) map[int32][]*sarama.ConsumerMessage {
	t.Helper()
	client, err := sarama.NewClient(b.addrs, b.Config())
	if err != nil {
		t.Fatalf("testbroker: client: %v", err)
	}
	defer closeQuietly(client)
	out, err := kfetch.ReadTopic(context.Background(), client, topic, readCommitted)
	if err != nil {
		t.Fatalf("testbroker: %v", err)
	}
	return out
}

func closeQuietly(c interface{ Close() error }) { _ = c.Close() }
