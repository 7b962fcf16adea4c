package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	metrics "github.com/rcrowley/go-metrics"
)

// Where a partition with no committed offset begins (Config.Start).
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Defaults of the Config fields whose zero value means "the adapter's default".
const (
	// DefaultMaxWaitTime bounds a fetch long-poll. Heartbeats share the group
	// client's connection with fetches, so this is also how long a heartbeat
	// (and therefore the news of a rebalance) can wait behind a fetch.
	DefaultMaxWaitTime = 100 * time.Millisecond
	// DefaultFetchBatch is how many buffered records one Source.Fetch hands
	// over when the caller's slice has no spare capacity.
	DefaultFetchBatch = 256
	// DefaultMetadataRefresh is how often the group client refreshes its
	// metadata and checks the input's partition count (sarama's default is
	// 10 minutes): partitions added to a running input are claimed within
	// about twice this, plus a rebalance. The cost is one Metadata request
	// for the input topic per interval and member.
	DefaultMetadataRefresh = time.Minute
)

// Config configures Run. Brokers, Topic and Group are required; every other
// field has a default. Durations left at zero take the value of the base
// Sarama configuration (or sarama's default when there is none).
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// Topic is the input topic. It must exist: Run does not create it.
	Topic string
	// Group is the consumer group id.
	Group string
	// Start is where a partition with no committed offset begins:
	// StartEarliest (the default when empty) or StartLatest.
	Start string
	// Sarama is an optional base configuration (version, TLS, SASL, client
	// id, timeouts). It is copied, never modified. The adapter overrides what
	// its guarantees depend on: offsets are never auto-committed, errors are
	// returned to it, the rebalance strategy is Strategy, and MetricRegistry
	// is Registry when that is set.
	Sarama *sarama.Config
	// Security configures TLS and SASL (files are read when Run starts).
	// Default: the base's Net.TLS and Net.SASL (none on a nil base).
	Security Security
	// Strategy assigns partitions to members. Default: sticky (eager), so a
	// member keeps its partitions across rebalances when it can. The
	// cooperative sticky strategy works too (retained partitions keep running
	// through a rebalance).
	Strategy sarama.BalanceStrategy
	// Logger receives the adapter's logs. Default: discard.
	Logger *slog.Logger
	// Registry, when set, becomes sarama's MetricRegistry for every client
	// Run creates, so sarama's client metrics and the engine's
	// (chainmetrics.Option) share one registry. Default: the base's.
	Registry metrics.Registry
	// SessionTimeout: a member that sends no heartbeat for this long is
	// removed from the group (sarama default 10s; brokers bound it by
	// group.min/max.session.timeout.ms).
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member heartbeats, and so how soon it
	// learns of a rebalance (sarama default 3s). Must be below SessionTimeout.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group waits for members to rejoin a
	// rebalance (sarama default 60s). A revoked partition drains and makes
	// its final commit before its member rejoins, so this must exceed the
	// chain's shutdown timeout (chain.WithShutdownTimeout) plus one commit.
	RebalanceTimeout time.Duration
	// MaxWaitTime bounds a fetch long-poll (default DefaultMaxWaitTime,
	// overriding the base: a long poll delays heartbeats and closes queued
	// behind it on the same connection).
	MaxWaitTime time.Duration
	// FetchBatch is the most records one Source.Fetch returns when the
	// caller's slice has no spare capacity (default DefaultFetchBatch).
	FetchBatch int
	// ProbeInterval is how often each claimed partition's leader is asked
	// for its high watermark (one ListOffsets request per partition), so
	// the chain's Stats can tell an unreachable leader from an idle
	// partition (PartitionStats.LeaderContact) and see lag the consumer has
	// not fetched (default DefaultProbeInterval; negative: no probe).
	ProbeInterval time.Duration
	// MetadataRefresh is how often the group client refreshes the input's
	// metadata and compares its partition count with the one the session
	// started with; a change triggers a rebalance, which assigns the new
	// partitions. sarama checks its cached metadata, refreshed at the same
	// period, so a new partition is seen after at most about twice this.
	// Default DefaultMetadataRefresh (overriding the base's
	// Metadata.RefreshFrequency); negative is an error.
	MetadataRefresh time.Duration
	// InstanceID, when set, makes the member static (Kafka's
	// group.instance.id, KIP-345): the group knows it by this id across
	// restarts, so a process that stops and starts again with the same id
	// within SessionTimeout gets its partitions back without a rebalance,
	// and no other member stops. It must be unique in the group (a second
	// live member with the same id is fenced) and needs protocol version
	// 2.3 (2.4 with LeaveOnStop). Default: the base's
	// Consumer.Group.InstanceId (none: a dynamic member).
	InstanceID string
	// LeaveOnStop makes a static member (InstanceID) leave the group when
	// Run returns, as a dynamic member always does: its partitions move to
	// the other members at once instead of after SessionTimeout. Leave it
	// false for a stop that is a restart (a rolling upgrade), true for one
	// that is not (a scale-in, a spot termination).
	LeaveOnStop bool
	// StandbyReplicas is how many members besides a partition's owner keep
	// a warm copy of its state (a chain with a changelog only): each
	// tails the partition's changelog into its local store up to the
	// group's committed changelog offset, and advertises what it holds
	// warm, so that when the partition moves the assignment prefers a
	// member holding it and its restore reads only the tail. Which members
	// hold a partition is a function of the group's membership (rendezvous
	// hashing of the members' instance ids, member ids without one), so
	// every member decides alike without coordination. Default 0: none.
	StandbyReplicas int
	// StandbyInterval is how often a member brings its standbys up to the
	// group's latest commit. Default DefaultStandbyInterval.
	StandbyInterval time.Duration
	// Hooks observe the member's partitions come and go. Default: none.
	Hooks Hooks
}

// Hooks are optional callbacks on the life of every claimed partition, for
// logging, metrics and tests. They run on the partition's claim goroutine,
// concurrently for different partitions, and must not block.
type Hooks struct {
	// Assigned is called when the member starts the chain on a claimed
	// partition, with the committed offset it resumes from (-1: none).
	Assigned func(topic string, partition int32, committed int64)
	// Released is called when the partition's chain has returned — after
	// its final commit — with RunPartition's error (nil: clean stop).
	Released func(topic string, partition int32, err error)
	// Standby is called after each catch-up of a partition this member
	// stands by for (Config.StandbyReplicas), on the standbys' goroutine.
	Standby func(topic string, partition int32, st chain.StandbyStats)
}

// Kafka's rule for topic names (kafka.common.internals.Topic), which is
// also its rule for group instance ids (JoinGroupRequest.validateGroupInstanceId).
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateInstanceID reports whether id can be a group instance id
// (Config.InstanceID): 1 to 249 of a-z A-Z 0-9 . _ -, not "." or "..".
func ValidateInstanceID(id string) error {
	if !legalTopic.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%q is not a legal group instance id (1-249 of a-z A-Z 0-9 . _ -, not . or ..)", id)
	}
	return nil
}

// Validate reports the first problem of the configuration, with the field's
// name, or nil. Run calls it.
func (c *Config) Validate() error {
	_, err := c.clientConfigs()
	return err
}

func (c *Config) validateFields() error {
	if err := needBrokers("Config", c.Brokers); err != nil {
		return err
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return fmt.Errorf("kafka: Config.Brokers: %q is not host:port", b)
		}
	}
	switch {
	case c.Topic == "":
		return errors.New("kafka: Config.Topic is required")
	case !legalTopic.MatchString(c.Topic) || c.Topic == "." || c.Topic == "..":
		return fmt.Errorf("kafka: Config.Topic %q is not a legal topic name (1-249 of a-z A-Z 0-9 . _ -)", c.Topic)
	case c.Group == "":
		return errors.New("kafka: Config.Group is required")
	case c.Start != "" && c.Start != StartEarliest && c.Start != StartLatest:
		return fmt.Errorf("kafka: Config.Start must be %q or %q, got %q", StartEarliest, StartLatest, c.Start)
	case c.SessionTimeout < 0:
		return fmt.Errorf("kafka: Config.SessionTimeout must be >= 0, got %v", c.SessionTimeout)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("kafka: Config.HeartbeatInterval must be >= 0, got %v", c.HeartbeatInterval)
	case c.RebalanceTimeout < 0:
		return fmt.Errorf("kafka: Config.RebalanceTimeout must be >= 0, got %v", c.RebalanceTimeout)
	case c.MaxWaitTime < 0:
		return fmt.Errorf("kafka: Config.MaxWaitTime must be >= 0, got %v", c.MaxWaitTime)
	case c.FetchBatch < 0:
		return fmt.Errorf("kafka: Config.FetchBatch must be >= 0, got %d", c.FetchBatch)
	case c.MetadataRefresh < 0:
		return fmt.Errorf("kafka: Config.MetadataRefresh must be >= 0, got %v", c.MetadataRefresh)
	case c.StandbyReplicas < 0:
		return fmt.Errorf("kafka: Config.StandbyReplicas must be >= 0, got %d", c.StandbyReplicas)
	case c.StandbyInterval < 0:
		return fmt.Errorf("kafka: Config.StandbyInterval must be >= 0, got %v", c.StandbyInterval)
	}
	if c.InstanceID != "" {
		if err := ValidateInstanceID(c.InstanceID); err != nil {
			return fmt.Errorf("kafka: Config.InstanceID: %w", err)
		}
	}
	return nil
}

// clientConfigs are the sarama configurations of Run's three clients: one
// per job, because sarama keeps one connection per broker per client and
// answers requests on it in order, so a request queued behind a fetch
// long-poll waits for it.
type clientConfigs struct {
	group  *sarama.Config // the consumer group: join/sync/heartbeat and the claims' fetches
	commit *sarama.Config // offset fetches and commits, metadata checks: never a long-poll
	poll   *sarama.Config // followers' own readers (polling mode)
}

func (c *Config) clientConfigs() (clientConfigs, error) {
	if err := c.validateFields(); err != nil {
		return clientConfigs{}, err
	}
	base, err := secured(c.Sarama, c.Security)
	if err != nil {
		return clientConfigs{}, err
	}
	derive := func(role string) *sarama.Config {
		sc := *base // shallow copy: the base is never modified
		if sc.ClientID == "" || sc.ClientID == "sarama" {
			sc.ClientID = "differential"
		}
		sc.ClientID += "-" + role
		if c.Registry != nil {
			sc.MetricRegistry = c.Registry
		}
		sc.Consumer.Return.Errors = true
		sc.Consumer.Offsets.AutoCommit.Enable = false
		sc.Consumer.MaxWaitTime = DefaultMaxWaitTime
		if c.MaxWaitTime > 0 {
			sc.Consumer.MaxWaitTime = c.MaxWaitTime
		}
		return &sc
	}
	cc := clientConfigs{group: derive("group"), commit: derive("commit"), poll: derive("poll")}
	// The group client joins with the instance id; the commit client's
	// offset commits and the transactor's offsets (which read it from the
	// commit client) carry it too, as the coordinator checks a static
	// member's commits against it.
	id := c.InstanceID
	if id == "" {
		id = base.Consumer.Group.InstanceId
	}
	if c.LeaveOnStop && id == "" {
		return clientConfigs{}, errors.New("kafka: Config.LeaveOnStop is for a static member (Config.InstanceID): a dynamic member always leaves")
	}
	cc.group.Consumer.Group.InstanceId = id
	cc.commit.Consumer.Group.InstanceId = id
	cc.poll.Consumer.Group.InstanceId = ""

	g := cc.group
	g.Consumer.Offsets.Initial = sarama.OffsetOldest
	if c.Start == StartLatest {
		g.Consumer.Offsets.Initial = sarama.OffsetNewest
	}
	if c.SessionTimeout > 0 {
		g.Consumer.Group.Session.Timeout = c.SessionTimeout
	}
	if c.HeartbeatInterval > 0 {
		g.Consumer.Group.Heartbeat.Interval = c.HeartbeatInterval
	}
	if c.RebalanceTimeout > 0 {
		g.Consumer.Group.Rebalance.Timeout = c.RebalanceTimeout
	}
	// The group client's metadata refresh is also its check of the input's
	// partition count (sarama's loopCheckPartitionNumbers); only the input
	// topic is refreshed, whatever the cluster's size.
	g.Metadata.RefreshFrequency = DefaultMetadataRefresh
	if c.MetadataRefresh > 0 {
		g.Metadata.RefreshFrequency = c.MetadataRefresh
	}
	g.Metadata.Full = false
	strategy := c.Strategy
	if strategy == nil {
		strategy = sarama.NewBalanceStrategySticky()
	}
	// The deprecated single Strategy field, if the base sets it, would win
	// over GroupStrategies.
	g.Consumer.Group.Rebalance.Strategy = nil
	g.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}

	for _, c := range []struct {
		role string
		sc   *sarama.Config
	}{{"group", cc.group}, {"commit", cc.commit}, {"polling", cc.poll}} {
		if err := c.sc.Validate(); err != nil {
			return clientConfigs{}, fmt.Errorf("kafka: sarama configuration of the %s client: %w", c.role, err)
		}
	}
	if !g.Version.IsAtLeast(sarama.V0_10_2_0) {
		return clientConfigs{}, fmt.Errorf("kafka: Config.Sarama.Version %v is too old: consumer groups need >= 0.10.2", g.Version)
	}
	if c.LeaveOnStop && !g.Version.IsAtLeast(sarama.V2_4_0_0) {
		// LeaveGroup v3 names a member by its instance id.
		return clientConfigs{}, fmt.Errorf("kafka: Config.LeaveOnStop needs Config.Sarama.Version >= 2.4, got %v", g.Version)
	}
	return cc, nil
}

// exactlyOnce adapts the clients to a chain in exactly-once mode: the input
// is read read_committed (an upstream's aborted records are never
// processed), and committed offsets are fetched with RequireStable
// (KIP-447: a new owner waits until a transaction that commits offsets for
// the partition has ended, instead of resuming from the offsets before
// it). Both need protocol versions of Kafka 2.5 (OffsetFetch v7).
func (cc *clientConfigs) exactlyOnce() {
	for _, sc := range []*sarama.Config{cc.group, cc.commit, cc.poll} {
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
		if !sc.Version.IsAtLeast(sarama.V2_5_0_0) {
			sc.Version = sarama.V2_5_0_0
		}
	}
}

// secured returns a copy of base (a new default configuration when nil)
// with sec applied; base itself when sec is zero.
func secured(base *sarama.Config, sec Security) (*sarama.Config, error) {
	if base == nil {
		base = sarama.NewConfig()
	}
	if sec.IsZero() {
		return base, sec.Validate()
	}
	sc := *base
	if err := sec.Apply(&sc); err != nil {
		return nil, err
	}
	return &sc, nil
}

// warnInsecure logs, loudly, that the brokers' certificates are not verified.
func warnInsecure(log *slog.Logger, sc *sarama.Config) {
	if sc.Net.TLS.Enable && sc.Net.TLS.Config != nil && sc.Net.TLS.Config.InsecureSkipVerify {
		log.Warn("TLS certificate verification is OFF (InsecureSkipVerify): the connection is encrypted, but anyone on the network path can impersonate the brokers; use it for tests only")
	}
}

func (c *Config) logger() *slog.Logger { return orDiscard(c.Logger) }

func (c *Config) probeInterval() time.Duration {
	if c.ProbeInterval == 0 {
		return DefaultProbeInterval
	}
	return c.ProbeInterval
}

func (c *Config) fetchBatch() int {
	if c.FetchBatch > 0 {
		return c.FetchBatch
	}
	return DefaultFetchBatch
}
