package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/kfetch"
)

// ErrChangelogMismatch: the changelog topic exists but cannot hold the
// chain's state (another partition count than the input, or a cleanup
// policy that deletes records).
var ErrChangelogMismatch = errors.New("kafka: changelog topic does not fit")

// ChangelogTopic is the default changelog topic of a group's chain over an
// input topic (DESIGN.md "State that follows its partition"): "<group>.<input topic>.state".
func ChangelogTopic(group, inputTopic string) string {
	return group + "." + inputTopic + ".state"
}

// ChangelogConfig configures NewChangelog. Brokers, InputTopic and Group
// are required.
type ChangelogConfig struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// InputTopic is the chain's input topic; the changelog has its
	// partition count, and changelog partition p holds the state of input
	// partition p.
	InputTopic string
	// Group is the consumer group id (for the default topic name).
	Group string
	// Topic is the changelog topic. Default ChangelogTopic(Group,
	// InputTopic).
	Topic string
	// Sarama is an optional base configuration (version, TLS, SASL). It is
	// copied, never modified. The producer overrides what the changelog's
	// guarantees depend on: idempotence, acks=all, one open request per
	// connection, explicit partitions.
	Sarama *sarama.Config
	// Security configures TLS and SASL, as Config.Security does.
	Security Security
	// ReplicationFactor of a changelog NewChangelog creates. Default: the
	// broker's default.
	ReplicationFactor int16
	// Logger receives the changelog's logs. Default: discard.
	Logger *slog.Logger
	// Registry, when set, becomes sarama's MetricRegistry. Default: the
	// base's.
	Registry metrics.Registry
}

// Changelog is the chain.Changelog on a compacted Kafka topic. It owns two
// clients: one for reading (restores, end offsets, metadata), and the
// idempotent producer's own, so that a restore's large fetches never delay
// a checkpoint's acknowledgements. Safe for concurrent use.
type Changelog struct {
	topic      string
	retention  time.Duration // delete.retention.ms
	input      string
	brokers    []string
	partitions atomic.Int32 // grows with the input (grow)
	grow       sync.Mutex   // serialises grow
	log        *slog.Logger
	read       sarama.Client
	readConf   *sarama.Config
	prodClient sarama.Client
	prod       *ackedProducer
}

var (
	_ chain.Changelog          = (*Changelog)(nil)
	_ chain.TombstoneRetention = (*Changelog)(nil)
)

// minCompactionLag is the changelog's min.compaction.lag.ms: records stay
// uncompacted this long, so that records appended after the committed
// offset by an instance that crashed (which a restore never applies) cannot
// make the log cleaner drop the committed values they supersede before the
// next owner has restored them. (The cleaner leaves the active segment alone
// anyway; this covers an append that crossed a segment roll.)
const minCompactionLag = time.Hour

// defaultDeleteRetention is Kafka's delete.retention.ms default.
const defaultDeleteRetention = 24 * time.Hour

// NewChangelog connects to the brokers and makes sure the changelog topic
// can hold the chain's state: it creates it when it is missing — one
// partition per input partition, cleanup.policy=compact — and checks it when
// it exists (same partition count, a compacting cleanup policy that does not
// delete). A mismatch is an error wrapping ErrChangelogMismatch that says
// what to change. This is the only topic the engine creates.
func NewChangelog(ctx context.Context, cfg ChangelogConfig) (*Changelog, error) {
	if err := needBrokers("ChangelogConfig", cfg.Brokers); err != nil {
		return nil, err
	}
	if cfg.InputTopic == "" || cfg.Group == "" {
		return nil, errors.New("kafka: ChangelogConfig needs InputTopic and Group")
	}
	topic := cfg.Topic
	if topic == "" {
		topic = ChangelogTopic(cfg.Group, cfg.InputTopic)
	}
	if !legalTopic.MatchString(topic) || topic == "." || topic == ".." {
		return nil, fmt.Errorf("kafka: changelog topic %q is not a legal topic name (1-249 of a-z A-Z 0-9 . _ -); name one explicitly", topic)
	}
	if topic == cfg.InputTopic {
		return nil, fmt.Errorf("kafka: the changelog topic must differ from the input topic %q", topic)
	}
	log := orDiscard(cfg.Logger)
	rc, pc, err := changelogConfigs(&cfg)
	if err != nil {
		return nil, err
	}
	warnInsecure(log, rc)
	read, err := sarama.NewClient(cfg.Brokers, rc)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect to brokers %v: %w", cfg.Brokers, err)
	}
	c := &Changelog{topic: topic, input: cfg.InputTopic, brokers: cfg.Brokers, log: log.With("changelog", topic), read: read, readConf: rc}
	n, err := c.ensure(ctx, cfg)
	if err != nil {
		_ = read.Close()
		return nil, err
	}
	c.partitions.Store(n)
	// The producer's own client, so that a grown changelog's new
	// partitions can be made known to it (refreshPartitions).
	pcl, err := sarama.NewClient(cfg.Brokers, pc)
	if err != nil {
		_ = read.Close()
		return nil, fmt.Errorf("kafka: changelog producer for brokers %v: %w", cfg.Brokers, err)
	}
	prod, err := sarama.NewAsyncProducerFromClient(pcl)
	if err != nil {
		_ = pcl.Close()
		_ = read.Close()
		return nil, fmt.Errorf("kafka: changelog producer for brokers %v: %w", cfg.Brokers, err)
	}
	c.prodClient = pcl
	c.prod = newAckedProducer(prod, func(m *sarama.ProducerMessage) {
		if w, ok := m.Metadata.(*appendWaiter); ok {
			w.ack(m.Offset, nil)
		}
	}, func(pe *sarama.ProducerError) {
		if w, ok := pe.Msg.Metadata.(*appendWaiter); ok {
			w.ack(-1, pe.Err)
		}
	})
	return c, nil
}

// changelogConfigs derives the reader's and the producer's configurations.
func changelogConfigs(cfg *ChangelogConfig) (read, prod *sarama.Config, err error) {
	base, err := secured(cfg.Sarama, cfg.Security)
	if err != nil {
		return nil, nil, err
	}
	// Idempotence and record batches need 0.11.
	rc := clientConfig(base, "-changelog-read", cfg.Registry, sarama.V0_11_0_0)
	pc := idempotent(base, "-changelog-producer", cfg.Registry, sarama.V0_11_0_0)
	read, prod = &rc, &pc
	// Always read_committed: records of aborted transactions (exactly-once
	// mode's, DESIGN.md "State that follows its partition") are never state; without transactions it reads
	// the same as read_uncommitted.
	read.Consumer.IsolationLevel = sarama.ReadCommitted
	read.Consumer.MaxWaitTime = DefaultMaxWaitTime
	read.Consumer.Fetch.MaxBytes = 64 << 20
	if prod.Producer.Retry.BackoffFunc == nil {
		// The outputs' retry budget (about two minutes): a lost changelog
		// leader is as fatal to a partition as a lost output leader.
		prod.Producer.Retry.BackoffFunc = RetryBackoff
	}
	prod.Producer.Partitioner = sarama.NewManualPartitioner
	for _, c := range []struct {
		role string
		sc   *sarama.Config
	}{{"reader", read}, {"producer", prod}} {
		if err := c.sc.Validate(); err != nil {
			return nil, nil, fmt.Errorf("kafka: sarama configuration of the changelog %s: %w", c.role, err)
		}
	}
	return read, prod, nil
}

// ensure creates the changelog when it is missing and checks it, returning
// its partition count.
func (c *Changelog) ensure(ctx context.Context, cfg ChangelogConfig) (int32, error) {
	in, err := c.read.Partitions(c.input)
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return 0, fmt.Errorf("%w: %q on brokers %v", ErrUnknownTopic, c.input, cfg.Brokers)
	case err != nil:
		return 0, fmt.Errorf("kafka: metadata of topic %q: %w", c.input, err)
	}
	want := int32(len(in))
	got, err := c.read.Partitions(c.topic)
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		if err := c.create(ctx, want, cfg); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, fmt.Errorf("kafka: metadata of changelog topic %q: %w", c.topic, err)
	case int32(len(got)) < want:
		// Partitions were added to the input since the changelog was
		// created (while no instance ran): the changelog follows — unless
		// it is refused anyway (a topic that is not a changelog is left
		// as it is).
		if err := c.checkConfig(ctx, cfg); err != nil {
			return 0, err
		}
		if err := c.addPartitions(ctx, int32(len(got)), want); err != nil {
			return 0, err
		}
	}
	return want, c.check(ctx, cfg, want)
}

// addPartitions grows the changelog from have to want partitions, as the
// input grew. It is safe: changelog partition p holds the state of input
// partition p and records are written to explicit partitions, so the
// existing partitions keep their meaning and the new ones start empty, as
// the input's new partitions do. Another instance growing it at the same
// time is no error.
func (c *Changelog) addPartitions(ctx context.Context, have, want int32) error {
	err := c.withAdmin(ctx, ChangelogConfig{Brokers: c.brokers}, func(admin sarama.ClusterAdmin) error {
		err := admin.CreatePartitions(c.topic, want, nil, false)
		if errors.Is(err, sarama.ErrInvalidPartitions) {
			// "Topic already has N partitions": another instance (or a lost
			// answer to an earlier attempt) grew it; the count is checked.
			c.log.Info("the changelog topic was grown already", "err", err)
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: add partitions to changelog topic %q (%d -> %d, as the input topic %q grew): %w", c.topic, have, want, c.input, err)
	}
	if err := kadmin.AwaitLeaders(c.brokers, c.adminConf(), c.topic, want, 30*time.Second); err != nil {
		return fmt.Errorf("kafka: changelog topic %q grown to %d partitions: %w", c.topic, want, err)
	}
	if err := c.read.RefreshMetadata(c.topic); err != nil {
		return fmt.Errorf("kafka: metadata of changelog topic %q: %w", c.topic, err)
	}
	c.log.Info("added partitions to the changelog topic, as the input grew", "from", have, "to", want, "input", c.input)
	return nil
}

// growMetadataWait bounds how long growTo asks for the input's metadata
// again before a partition it was asked for is called missing.
var growMetadataWait = 10 * time.Second

// growTo makes the changelog hold input partition partition, added to the
// input while the engine runs: it adds the changelog partitions the input
// has more of (addPartitions), and fails with ErrChangelogMismatch when the
// input has no such partition either.
func (c *Changelog) growTo(ctx context.Context, partition int32) error {
	c.grow.Lock()
	defer c.grow.Unlock()
	if partition < c.partitions.Load() {
		return nil
	}
	// The group assigned partition, so the input has it — but the broker
	// answering metadata may not know yet: partitions added to a topic
	// reach each broker's metadata cache a moment after the controller
	// took them (seen on a real broker right after CreatePartitions). So
	// the input's count is asked again for a while before the partition is
	// called missing.
	var want int32
	wait := 20 * time.Millisecond
	deadline := time.Now().Add(growMetadataWait)
	for {
		if err := c.read.RefreshMetadata(c.input, c.topic); err != nil {
			return fmt.Errorf("kafka: metadata of topics %q and %q: %w", c.input, c.topic, err)
		}
		in, err := c.read.Partitions(c.input)
		if err != nil {
			return fmt.Errorf("kafka: metadata of topic %q: %w", c.input, err)
		}
		want = int32(len(in))
		if partition < want {
			break
		}
		if !time.Now().Add(wait).Before(deadline) {
			return fmt.Errorf("%w: input partition %d has no changelog partition, and topic %q has only %d partitions (after %s)", ErrChangelogMismatch, partition, c.input, want, growMetadataWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	got, err := c.read.Partitions(c.topic)
	if err != nil {
		return fmt.Errorf("kafka: metadata of changelog topic %q: %w", c.topic, err)
	}
	if have := int32(len(got)); have < want {
		if err := c.addPartitions(ctx, have, want); err != nil {
			return err
		}
	}
	if err := refreshPartitions(c.prodClient, c.topic, want-1); err != nil {
		return err
	}
	c.partitions.Store(want)
	return nil
}

// refreshPartitions makes sure client's metadata has partition p of topic:
// a producer refuses a message for a partition its cached metadata lacks
// (ErrInvalidPartition) instead of asking again.
func refreshPartitions(client sarama.Client, topic string, p int32) error {
	if ps, err := client.Partitions(topic); err == nil && int32(len(ps)) > p {
		return nil
	}
	if err := client.RefreshMetadata(topic); err != nil {
		return fmt.Errorf("kafka: metadata of topic %q: %w", topic, err)
	}
	if ps, err := client.Partitions(topic); err != nil || int32(len(ps)) <= p {
		return fmt.Errorf("kafka: topic %q has no partition %d (%d known): %w", topic, p, len(ps), err)
	}
	return nil
}

// adminAttempts bounds how long the changelog's admin requests are retried
// when a broker cannot be reached: an engine restarted while one broker of
// the cluster is down must not fail because the admin client picked the dead
// one (sarama sends DescribeConfigs to a random broker of its metadata and
// CreateTopics to the controller it cached).
const adminAttempts = 30 * time.Second

// withAdmin runs fn with a fresh cluster admin, again with a new one (and so
// another broker) while it fails for a transient reason or because the
// broker has not learnt of the topic yet (staleTopicError), for at most
// adminAttempts or until ctx ends.
func (c *Changelog) withAdmin(ctx context.Context, cfg ChangelogConfig, fn func(sarama.ClusterAdmin) error) error {
	deadline := time.Now().Add(adminAttempts)
	for {
		admin, err := sarama.NewClusterAdmin(cfg.Brokers, c.adminConf())
		if err == nil {
			err = fn(admin)
			_ = admin.Close()
		} else {
			err = fmt.Errorf("kafka: admin client: %w", err)
		}
		var stale *staleTopicError
		if err == nil || !errors.As(err, &stale) && !transient(err) || time.Now().After(deadline) {
			return err
		}
		c.log.Warn("changelog topic admin request failed; retrying on another connection", "err", err)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// staleTopicError is an admin request a broker refused because its
// metadata does not have a topic yet that the cluster's does: withAdmin
// asks again (on a new connection, so perhaps another broker).
type staleTopicError struct{ err error }

func (e *staleTopicError) Error() string { return e.err.Error() }
func (e *staleTopicError) Unwrap() error { return e.err }

// adminConf is the reader's configuration with a metrics registry of its own:
// sarama unregisters a broker's shared metric names from the registry when
// that broker's connection closes, so a short-lived client on the run's
// registry would make series of the long-lived clients vanish from /metrics
// until they reconnect.
func (c *Changelog) adminConf() *sarama.Config {
	ac := *c.readConf
	ac.MetricRegistry = metrics.NewRegistry()
	return &ac
}

func (c *Changelog) create(ctx context.Context, partitions int32, cfg ChangelogConfig) error {
	compact, lag := "compact", strconv.FormatInt(minCompactionLag.Milliseconds(), 10)
	detail := &sarama.TopicDetail{
		NumPartitions:     partitions,
		ReplicationFactor: -1,
		ConfigEntries:     map[string]*string{"cleanup.policy": &compact, "min.compaction.lag.ms": &lag},
	}
	if cfg.ReplicationFactor > 0 {
		detail.ReplicationFactor = cfg.ReplicationFactor
	}
	err := c.withAdmin(ctx, cfg, func(admin sarama.ClusterAdmin) error {
		err := admin.CreateTopic(c.topic, detail, false)
		if errors.Is(err, sarama.ErrTopicAlreadyExists) {
			// Another instance created it first (or an earlier attempt whose
			// answer was lost did): check it like any other.
			c.log.Info("the changelog topic exists already")
			return nil
		}
		if err == nil {
			c.log.Info("created the changelog topic", "partitions", partitions, "cleanup.policy", compact, "min.compaction.lag.ms", lag)
		}
		return err
	})
	switch {
	case err == nil:
	default:
		return fmt.Errorf("kafka: create changelog topic %q (%d partitions, cleanup.policy=compact): %w", c.topic, partitions, err)
	}
	if err := kadmin.AwaitLeaders(cfg.Brokers, c.adminConf(), c.topic, partitions, 30*time.Second); err != nil {
		return fmt.Errorf("kafka: changelog topic %q: %w", c.topic, err)
	}
	return c.read.RefreshMetadata(c.topic)
}

// check reports a changelog that cannot hold the state: another partition
// count than the input, or a cleanup policy that deletes old records (state
// that was not rewritten for retention.ms would be lost).
func (c *Changelog) check(ctx context.Context, cfg ChangelogConfig, want int32) error {
	got, err := c.read.Partitions(c.topic)
	if err != nil {
		return fmt.Errorf("kafka: metadata of changelog topic %q: %w", c.topic, err)
	}
	if int32(len(got)) != want {
		return fmt.Errorf("%w: %q has %d partitions, the input topic %q has %d: the state of input partition p lives in changelog partition p, so they must match (a changelog with fewer partitions is grown; one with more belongs to another input: name another changelog topic)",
			ErrChangelogMismatch, c.topic, len(got), c.input, want)
	}
	return c.checkConfig(ctx, cfg)
}

// checkConfig is check's half on the topic's configuration: its cleanup
// policy, and its delete.retention.ms noted.
func (c *Changelog) checkConfig(ctx context.Context, cfg ChangelogConfig) error {
	var entries []sarama.ConfigEntry
	err := c.withAdmin(ctx, cfg, func(admin sarama.ClusterAdmin) (err error) {
		entries, err = admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: c.topic,
			ConfigNames: []string{"cleanup.policy", "delete.retention.ms"}})
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			// The cluster's metadata has the topic (Partitions found it
			// above): the broker asked — any one, sarama picks it at
			// random — has not learnt of it yet. Right after create, a
			// real cluster's brokers learn a new topic from the metadata
			// log each at its own pace.
			return &staleTopicError{err}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: describe changelog topic %q: %w", c.topic, err)
	}
	policy := ""
	c.retention = defaultDeleteRetention
	for _, e := range entries {
		switch e.Name {
		case "cleanup.policy":
			policy = e.Value
		case "delete.retention.ms":
			if ms, err := strconv.ParseInt(e.Value, 10, 64); err == nil && ms >= 0 {
				// 0 drops tombstones at the next cleaning: as short as it gets
				// (a 0 TombstoneRetention would mean "for ever").
				c.retention = max(time.Duration(ms)*time.Millisecond, time.Nanosecond)
			}
		}
	}
	ps := strings.Split(strings.ReplaceAll(policy, " ", ""), ",")
	if !slices.Contains(ps, "compact") || slices.Contains(ps, "delete") {
		return fmt.Errorf("%w: %q has cleanup.policy=%q, want compact: with deletion, state not rewritten within retention.ms is lost (kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)",
			ErrChangelogMismatch, c.topic, policy, c.topic)
	}
	return ctx.Err()
}

// TombstoneRetention implements chain.TombstoneRetention: the topic's
// delete.retention.ms (Kafka's default, a day, when the broker names none).
func (c *Changelog) TombstoneRetention() time.Duration { return c.retention }

// Topic is the changelog topic's name.
func (c *Changelog) Topic() string { return c.topic }

// Partitions is the changelog's partition count (the input's, as far as
// this Changelog knows: it grows when a partition added to the input is
// claimed).
func (c *Changelog) Partitions() int32 { return c.partitions.Load() }

// Partition implements chain.Changelog. An input partition added since the
// changelog was checked gets its changelog partition here: the changelog
// topic is grown to the input's partition count (addPartitions), within
// the admin requests' retry budget.
func (c *Changelog) Partition(topic string, partition int32) (chain.ChangelogPartition, error) {
	switch {
	case topic != c.input:
		return nil, fmt.Errorf("kafka: changelog %q holds the state of topic %q, not %q", c.topic, c.input, topic)
	case partition < 0:
		return nil, fmt.Errorf("%w: input partition %d", ErrChangelogMismatch, partition)
	case partition >= c.partitions.Load():
		ctx, cancel := context.WithTimeout(context.Background(), 2*adminAttempts)
		defer cancel()
		if err := c.growTo(ctx, partition); err != nil {
			return nil, err
		}
	}
	return &changelogPartition{c: c, partition: partition}, nil
}

// Close waits for every record handed to the producer to be acknowledged or
// failed, then closes both clients. Idempotent.
func (c *Changelog) Close() error {
	if !c.prod.close() {
		return nil
	}
	return errors.Join(c.prodClient.Close(), c.read.Close())
}

// changelogPartition is one changelog partition.
type changelogPartition struct {
	c         *Changelog
	partition int32
}

func (p *changelogPartition) Close() error { return nil }

// End returns the partition's high watermark: the offset after its last
// record, committed or not (Read waits for the records below it to be
// stable).
func (p *changelogPartition) End(ctx context.Context) (int64, error) {
	var end int64
	err := p.retry(ctx, "end offset", func() error {
		b, err := p.c.read.Leader(p.c.topic, p.partition)
		if err != nil {
			return err
		}
		req := sarama.NewOffsetRequest(p.c.readConf.Version)
		req.IsolationLevel = sarama.ReadUncommitted
		req.AddBlock(p.c.topic, p.partition, sarama.OffsetNewest, 1)
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			_ = b.Close()
			return err
		}
		blk := resp.GetBlock(p.c.topic, p.partition)
		switch {
		case blk == nil:
			return sarama.ErrIncompleteResponse
		case blk.Err != sarama.ErrNoError:
			return blk.Err
		case len(blk.Offsets) > 0:
			end = blk.Offsets[0]
		default:
			end = blk.Offset
		}
		return nil
	})
	return end, err
}

// errUnstable: the records to read exist but are not stable yet — an open
// transaction (of a process that crashed or was expelled, or whose commit
// markers are still being written) holds the partition's last stable
// offset below them. The transaction coordinator ends it within the
// transaction timeout, so a read waits for it, for as long as its context
// lets it.
var errUnstable = errors.New("the last stable offset is below the records to read (an open transaction holds it)")

// retry runs op until it succeeds, fails for good, or ctx ends; leader
// moves and broken connections are retried with a bounded backoff, an
// unstable end (errUnstable) until ctx ends.
func (p *changelogPartition) retry(ctx context.Context, what string, op func() error) error {
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		unstable := errors.Is(err, errUnstable)
		if unstable {
			attempt = 0
		}
		if !transientRead(err) || attempt >= 20 {
			return fmt.Errorf("kafka: changelog %s/%d: %s: %w", p.c.topic, p.partition, what, err)
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		if unstable {
			p.c.log.Info("changelog read waits for an open transaction to end", "partition", p.partition, "op", what, "err", err, "backoff", backoff)
		} else {
			p.c.log.Warn("changelog request failed; retrying", "partition", p.partition, "op", what, "err", err, "backoff", backoff)
		}
		_ = p.c.read.RefreshMetadata(p.c.topic)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func transientRead(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrRequestTimedOut,
			sarama.ErrNetworkException, sarama.ErrBrokerNotAvailable, sarama.ErrReplicaNotAvailable,
			sarama.ErrOffsetNotAvailable, sarama.ErrUnknownLeaderEpoch, sarama.ErrFencedLeaderEpoch,
			sarama.ErrNotEnoughReplicas, sarama.ErrKafkaStorageError:
			return true
		}
		return false
	}
	return !errors.Is(err, sarama.ErrClosedClient) && !errors.Is(err, kfetch.ErrLegacyFormat) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// fetched is one fetch response's records, or the read's error.
type fetched struct {
	recs []chain.ChangelogRecord
	err  error
}

// Read implements chain.ChangelogPartition. One goroutine fetches the next
// response while fn applies the current one, so that the network, sarama's
// decoding and the store's writes overlap.
func (p *changelogPartition) Read(ctx context.Context, from, to int64, fn func([]chain.ChangelogRecord) error) error {
	if from >= to {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan fetched, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer close(ch)
		filter := kfetch.Filter{ReadCommitted: p.c.readConf.Consumer.IsolationLevel == sarama.ReadCommitted}
		offset, stalls := from, 0
		for offset < to {
			var recs []chain.ChangelogRecord
			var next int64
			err := p.retry(ctx, "fetch", func() error {
				var err error
				recs, next, err = p.fetch(&filter, offset, to)
				return err
			})
			if err == nil && next == offset {
				if stalls++; stalls == 3 {
					err = fmt.Errorf("kafka: changelog %s/%d: a fetch at offset %d (reading up to %d) returns no records", p.c.topic, p.partition, offset, to)
				}
			} else {
				stalls = 0
			}
			select {
			case ch <- fetched{recs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
			offset = next
		}
	})
	for f := range ch {
		if f.err != nil {
			return f.err
		}
		if len(f.recs) == 0 {
			continue
		}
		if err := fn(f.recs); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// fetchBytes is the partition's byte limit of one restore fetch.
const fetchBytes = 8 << 20

// fetch sends one Fetch at offset and returns the records below to and the
// next offset to fetch.
func (p *changelogPartition) fetch(f *kfetch.Filter, offset, to int64) ([]chain.ChangelogRecord, int64, error) {
	b, err := p.c.read.Leader(p.c.topic, p.partition)
	if err != nil {
		return nil, offset, err
	}
	resp, err := b.Fetch(kfetch.NewRequest(p.c.readConf, p.c.topic, p.partition, offset, fetchBytes))
	if err != nil {
		_ = b.Close()
		return nil, offset, err
	}
	block, err := kfetch.Block(resp, p.c.topic, p.partition)
	if err != nil {
		return nil, offset, err
	}
	if end := kfetch.End(block, f.ReadCommitted); end < to {
		if block.HighWaterMarkOffset >= to {
			return nil, offset, fmt.Errorf("%w: reading up to %d, stable up to %d, high watermark %d", errUnstable, to, end, block.HighWaterMarkOffset)
		}
		return nil, offset, fmt.Errorf("%w: reading up to %d, but the partition ends at %d", sarama.ErrOffsetOutOfRange, to, end)
	}
	n := 0
	for _, rs := range block.RecordsSet {
		if rs.RecordBatch != nil {
			n += len(rs.RecordBatch.Records)
		}
	}
	recs := make([]chain.ChangelogRecord, 0, n)
	next, err := f.Records(block, offset, to, func(batch *sarama.RecordBatch, r *sarama.Record) {
		recs = append(recs, chain.ChangelogRecord{Offset: kfetch.Offset(batch, r), Key: r.Key, Value: r.Value})
	})
	return recs, min(next, to), err
}

// appendWaiter is one Append call: it collects the acknowledgements of its
// records and the largest acknowledged offset.
type appendWaiter struct {
	remaining atomic.Int64
	mu        sync.Mutex
	last      int64
	err       error
	done      chan struct{}
	once      sync.Once
}

func (w *appendWaiter) ack(offset int64, err error) {
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = err
	}
	w.last = max(w.last, offset)
	w.mu.Unlock()
	if err != nil || w.remaining.Add(-1) == 0 {
		w.once.Do(func() { close(w.done) })
	}
}

// Append implements chain.ChangelogPartition.
func (p *changelogPartition) Append(ctx context.Context, recs []chain.ChangelogRecord) (int64, error) {
	if len(recs) == 0 {
		return p.End(ctx)
	}
	w := &appendWaiter{last: -1, done: make(chan struct{})}
	w.remaining.Store(int64(len(recs)))
	if err := p.send(ctx, recs, w); err != nil {
		return 0, err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("kafka: changelog %s/%d: waiting for acknowledgements: %w", p.c.topic, p.partition, ctx.Err())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, fmt.Errorf("kafka: changelog %s/%d: append: %w", p.c.topic, p.partition, w.err)
	}
	return w.last + 1, nil
}

// send hands the records to the producer in order.
func (p *changelogPartition) send(ctx context.Context, recs []chain.ChangelogRecord, w *appendWaiter) error {
	_, err := p.c.prod.sendAll(ctx, len(recs), func(i int) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: p.c.topic, Partition: p.partition, Key: sarama.ByteEncoder(recs[i].Key), Metadata: w}
		if recs[i].Value != nil {
			m.Value = sarama.ByteEncoder(recs[i].Value)
		}
		return m
	})
	switch {
	case errors.Is(err, ErrProducerClosed):
		return fmt.Errorf("kafka: changelog %s: %w", p.c.topic, err)
	case err != nil:
		return fmt.Errorf("kafka: changelog %s/%d: append: %w", p.c.topic, p.partition, err)
	}
	return nil
}
