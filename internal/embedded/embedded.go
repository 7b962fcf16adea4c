package embedded

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is a running in-process cluster. Create it with Start; stop it with Close.
type Cluster struct {
	fake  *kfake.Cluster
	addrs []string
}

// Opt configures Start. Options are typed so that only options of this package fit.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	brokers           int
	ports             []int
	defaultPartitions int
	autoCreate        bool
	minSession        time.Duration
	topics            []seedTopic
	sasl              []saslUser
	tls               *tls.Config
}

type saslUser struct{ mechanism, user, password string }

type seedTopic struct {
	name       string
	partitions int32
}

// Brokers sets how many brokers the cluster has, overriding the default of 1. Partition
// leadership and group coordination spread over them, as on a real cluster.
func Brokers(n int) Opt { return optFunc(func(c *config) { c.brokers = n }) }

// Ports sets the ports the brokers listen on, one per broker, overriding the default of
// free ports chosen by the system (the demo uses this to listen where a real broker would).
func Ports(ports ...int) Opt { return optFunc(func(c *config) { c.ports = ports }) }

// Partitions sets the partition count of topics created without one (CreateTopics with -1
// partitions, or auto-created topics), overriding the default of 1.
func Partitions(n int32) Opt { return optFunc(func(c *config) { c.defaultPartitions = int(n) }) }

// AutoCreateTopics lets a metadata request create the topics it names, overriding the
// default of off (as on the real test broker, so a misspelled topic fails loudly).
func AutoCreateTopics() Opt { return optFunc(func(c *config) { c.autoCreate = true }) }

// MinSessionTimeout sets the smallest group session timeout the cluster accepts, overriding
// the default of 100 ms (a real broker's default is 6 s).
func MinSessionTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) { c.minSession = d })
}

// Topic creates the topic with the given partition count at start. It may be repeated.
func Topic(name string, partitions int32) Opt {
	return optFunc(func(c *config) { c.topics = append(c.topics, seedTopic{name, partitions}) })
}

// SASL requires SASL authentication on every connection and adds a user
// for mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512). It may be
// repeated; every user may do everything.
func SASL(mechanism, user, password string) Opt {
	return optFunc(func(c *config) { c.sasl = append(c.sasl, saslUser{mechanism, user, password}) })
}

// TLS makes every broker accept only TLS connections, with cfg (its
// Certificates are the brokers' certificate).
func TLS(cfg *tls.Config) Opt { return optFunc(func(c *config) { c.tls = cfg }) }

// Start starts a cluster and returns once it accepts connections.
func Start(opts ...Opt) (*Cluster, error) {
	cfg := config{brokers: 1, defaultPartitions: 1, minSession: 100 * time.Millisecond}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.brokers < 1 {
		return nil, fmt.Errorf("embedded: %d brokers, need at least 1", cfg.brokers)
	}
	if len(cfg.ports) > 0 && len(cfg.ports) != cfg.brokers {
		return nil, fmt.Errorf("embedded: %d ports for %d brokers", len(cfg.ports), cfg.brokers)
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(cfg.brokers),
		kfake.DefaultNumPartitions(cfg.defaultPartitions),
		kfake.GroupMinSessionTimeout(cfg.minSession),
		// No time retention, as on scripts/kafka.sh's broker: kfake applies
		// retention.ms (default 7 days, by record timestamp) to every topic
		// once any topic sets a retention, and the generated workloads are
		// dated weeks back.
		kfake.BrokerConfigs(map[string]string{"log.retention.ms": "-1"}),
	}
	if len(cfg.ports) > 0 {
		kopts = append(kopts, kfake.Ports(cfg.ports...))
	}
	if cfg.autoCreate {
		kopts = append(kopts, kfake.AllowAutoTopicCreation())
	}
	for _, t := range cfg.topics {
		kopts = append(kopts, kfake.SeedTopics(t.partitions, t.name))
	}
	if len(cfg.sasl) > 0 {
		kopts = append(kopts, kfake.EnableSASL())
		for _, u := range cfg.sasl {
			kopts = append(kopts, kfake.Superuser(u.mechanism, u.user, u.password))
		}
	}
	if cfg.tls != nil {
		kopts = append(kopts, kfake.TLS(cfg.tls))
	}
	fake, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: start kfake: %w", err)
	}
	return &Cluster{fake: fake, addrs: fake.ListenAddrs()}, nil
}

// Addrs returns the brokers' host:port addresses, to use as bootstrap servers.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Close stops the cluster and drops its data. Clients still connected see their
// connections closed. It is idempotent.
func (c *Cluster) Close() { c.fake.Close() }

// Fake returns the underlying kfake cluster, for tests that inject faults (kfake's Control
// functions) or move partition leadership.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }
