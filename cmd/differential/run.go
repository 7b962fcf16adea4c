package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/internal/statequery"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// execute runs the chain until ctx ends (a clean stop: kafka.Run drains
// every partition and makes the final commits) or a fatal error.
func (o *runOptions) execute(ctx context.Context, e *env) error {
	log := newLogger(e.stderr, o.logFormat, o.logLevel)
	defer flushLog(log)
	if o.logLevel == "debug" {
		// sarama's own client log (connections, subscriptions, rebalances)
		// is the first thing to read when a partition stops moving.
		saramaLog.Store(log.With("component", "sarama"))
		defer saramaLog.Store(nil)
	}
	if o.security.TLS.InsecureSkipVerify {
		log.Warn(insecureWarning) // kafka.NewProducer and kafka.Run warn again, for their clients
	}
	sc := baseSarama(o.version, o.maxRecordBytes)
	partitions, err := o.preflight(sc)
	if err != nil {
		return err
	}
	// One registry for everything: the engine's gauges and the metrics of
	// every sarama client (consumer group, commits, pollers, producer).
	reg := metrics.NewRegistry()

	db, err := store.OpenPebble(o.stateDir, store.WithLogger(log), store.WithStateCacheBytes(o.stateCache))
	if err != nil {
		return stateDirError(o.stateDir, err)
	}
	defer closeLogged(log, "state store", db)
	h := e.hooks
	var cl *kafka.Changelog
	if o.changelog {
		// The only topic run creates: with the input's partition count,
		// compacted; an existing one is checked (exit 1 on a mismatch).
		cl, err = kafka.NewChangelog(ctx, kafka.ChangelogConfig{
			Brokers: o.brokers, InputTopic: o.topic, Group: o.group, Topic: o.changelogName(),
			Sarama: sc, Security: o.security, Logger: log, Registry: reg,
		})
		if err != nil {
			return err
		}
		// Closed after kafka.Run returned: every append was acknowledged.
		defer closeLogged(log, "changelog", cl)
		var chcl chain.Changelog = cl
		if h.wrapChangelog != nil {
			chcl = h.wrapChangelog(cl)
		}
		h.chainOptions = append([]chain.Option{chain.WithChangelog(chcl)}, h.chainOptions...)
	}
	switch o.metaVersion {
	case "2":
		// Rolling-upgrade compatibility: write nothing a binary before
		// dfl3 would take for another application's metadata.
		h.chainOptions = append(h.chainOptions, chain.WithoutCarriedOffsets())
	case "3":
		// Nothing a binary before dfl4 would not read.
		h.chainOptions = append(h.chainOptions, chain.WithoutRecordedIdleReleases())
	}
	var prod chain.Producer
	if o.exactlyOnce() {
		tx, err := o.transactor(db, cl, sc, reg, log)
		if errors.Is(err, kafka.ErrNoTransactions) {
			return fmt.Errorf("--guarantee exactly-once (the default) needs Kafka transactions: %w; make the fix above, or run without transactions with --guarantee at-least-once (every output at least once: a crash repeats the outputs since the last commit)", err)
		}
		if err != nil {
			return err
		}
		// Closed after kafka.Run returned: every partition's final cycle
		// has committed or aborted its transaction by then.
		defer closeLogged(log, "transactional producer", tx)
		var txn chain.Transactor = tx
		if h.wrapProducer != nil {
			// The chaosbreak build's broken producer, inside the transaction.
			txn = wrappedTransactor{Transactor: tx, out: h.wrapProducer(tx)}
		}
		h.chainOptions = append([]chain.Option{chain.WithExactlyOnce(txn)}, h.chainOptions...)
	} else {
		p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: o.brokers, Sarama: sc, Security: o.security, Logger: log, Registry: reg})
		if err != nil {
			return err
		}
		// Closed after kafka.Run returned: every output of a committed record
		// is acknowledged by then, so Close has nothing left to flush.
		defer closeLogged(log, "producer", p)
		prod = p
	}
	tracing, stopTracing, err := o.tracing.start(ctx, o.group, log)
	if err != nil {
		return err
	}
	// Runs before the producer's Close (defers run last first): every
	// record kafka.Run finished has ended its span by then.
	defer stopTracing()
	h.chainOptions = append(append([]chain.Option(nil), h.chainOptions...), tracing...)
	var out chain.Producer = prod
	if h.wrapProducer != nil && prod != nil {
		out = h.wrapProducer(prod)
	}
	var txns *liveview.TxnTracker // the live view's exactly-once cycles
	if o.serving.addr != "" && o.exactlyOnce() {
		txns = liveview.NewTxnTracker(nil)
		h.chainOptions = append(h.chainOptions, txns.Option())
	}
	ch, err := newAttributionChain(o.attribution(), o.engineSettings, db, out, reg, log, h)
	if err != nil {
		return &usageError{err}
	}
	advertised := ""        // the HTTP address the member advertises through the group
	var running atomic.Bool // /livez: false once kafka.Run has returned
	running.Store(true)
	if o.serving.addr != "" {
		health := &metricshttp.Health{Stats: ch.Stats, Joined: groupJoined(reg, o.group), StallTimeout: o.stallTimeout, Now: e.hooks.now,
			Running: running.Load}
		mo := metricshttp.Options{Topics: o.topics(), Stats: ch.Stats, Stages: ch.StageNames()}
		view := liveview.New(liveview.Config{
			Stats: ch.Stats, Stages: ch.StageNames(), Health: health.Check, Txn: txns, OffsetDistance: o.offsetDistance,
			Info: []liveview.Field{{Name: "group", Value: o.group}, {Name: "topic", Value: o.topic},
				{Name: "guarantee", Value: o.guarantee}, {Name: "gate", Value: o.gate}},
		})
		owners, closeOwners := o.groupOwners(sc)
		defer closeOwners()
		state := func(bound string) http.Handler {
			advertised = o.serving.advertise(bound)
			return statequery.Handler(statequery.Config{
				Topic: o.topic, Partitions: func() (int32, error) { return int32(partitions), nil },
				Stats: ch.Stats, Rules: o.attribution(), Owners: owners, Self: advertised, Logger: log,
				Open: func(p int32) (statequery.Snapshot, error) { return db.Snapshot(o.topic, p) },
			})
		}
		stop, err := serveHTTP(httpServer{httpServing: o.serving, reg: reg, mo: mo, health: health, view: view, state: state},
			log, e.hooks.metricsListening)
		if err != nil {
			return err
		}
		defer stop()
		if advertised == "" {
			log.Warn("state queries: this member advertises no HTTP address (its --http-addr's host is a wildcard): other members answer 503 for its partitions; set --advertised-http-addr")
		} else {
			log.Info("state queries: advertising this member's HTTP address through the group", "advertised_http_addr", advertised)
		}
	}
	changelog := "off"
	if o.changelog {
		changelog = o.changelogName()
	}
	log.Info("differential run starting", "brokers", o.brokers, "topic", o.topic, "group", o.group,
		"output", o.output, "dlq", o.dlq, "state_dir", o.stateDir, "changelog", changelog, "guarantee", o.guarantee,
		"assignor", o.assignor, "instance_id", o.instanceID, "standby_replicas", o.standbys, "key_concurrency", o.keyConcurrency, "gate", o.gate)
	if o.velocity.window > 0 {
		log.Info("velocity stage on: click -> velocity -> install -> purchase", "settings", o.velocity.describe(),
			"alerts", o.velocity.alertsTopic(o.output))
	}
	err = kafka.Run(ctx, ch, kafka.Config{
		Brokers: o.brokers, Topic: o.topic, Group: o.group, Start: o.start,
		Sarama: sc, Security: o.security, Logger: log, Registry: reg, Strategy: kafka.Advertise(o.strategy(), advertised),
		RebalanceTimeout: rebalanceTimeout(o.shutdown),
		SessionTimeout:   o.sessionTimeout, HeartbeatInterval: o.heartbeat,
		InstanceID: o.instanceID, LeaveOnStop: o.leaveOnStop, StandbyReplicas: o.standbys,
		MetadataRefresh: o.metaRefresh,
		// /healthz calls a partition stalled when its leader has not
		// answered for --stall-timeout: probe often enough that an idle
		// partition never looks like one (and not more often than 10 times
		// a second per partition).
		ProbeInterval: max(min(kafka.DefaultProbeInterval, o.stallTimeout/5), 100*time.Millisecond),
	})
	running.Store(false)
	if err != nil {
		return err
	}
	log.Info("differential run stopped cleanly")
	return nil
}

// groupOwners maps the input's partitions to the HTTP addresses their
// members advertise (kafka.GroupOwners), with an admin client connected at
// the first call; closeAdmin closes it.
func (o *runOptions) groupOwners(sc *sarama.Config) (owners func(context.Context) (map[int32]string, error), closeAdmin func()) {
	var mu sync.Mutex
	var admin sarama.ClusterAdmin
	owners = func(ctx context.Context) (map[int32]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if admin == nil {
			c, err := securedSarama(sc, o.security)
			if err != nil {
				return nil, err
			}
			c.MetricRegistry = metrics.NewRegistry() // its metrics stay out of the served registry
			if admin, err = sarama.NewClusterAdmin(o.brokers, c); err != nil {
				admin = nil
				return nil, kafka.ExplainConnect(err, o.security)
			}
		}
		return kafka.GroupOwners(ctx, admin, o.group, o.topic)
	}
	return owners, func() {
		mu.Lock()
		defer mu.Unlock()
		if admin != nil {
			_ = admin.Close()
		}
	}
}

// topics are the topics run reads and writes, for the topic labels of
// sarama's per-topic metrics.
func (o *runOptions) topics() []string {
	t := []string{o.topic, o.output, o.dlq, o.velocity.alerts}
	if o.changelog {
		t = append(t, o.changelogName())
	}
	return t
}

// transactor connects exactly-once mode's transactional producer, with the
// transactional id --transactional-id, or <group>.<--instance-id>, or
// <group>.<the state directory's instance id>: stable across restarts of
// this process (a restart fences its previous incarnation and aborts the
// transaction it left open at once), never shared by two live processes
// (each has its own locked state directory; two live static members with
// one instance id are refused by the group, which fences one of them). A
// static member's comes from its instance id because the group hands its
// partitions back to the restarted process at once, before a transaction
// the previous one left open would time out: only the same transactional
// id aborts it at once, and the instance id is the one name the restart is
// sure to keep, with a fresh or moved state directory too.
func (o *runOptions) transactor(db *store.DB, cl *kafka.Changelog, sc *sarama.Config, reg metrics.Registry, log *slog.Logger) (*kafka.Transactor, error) {
	id, err := o.transactionalID(db)
	if err != nil {
		return nil, err
	}
	if o.txnTimeout >= o.sessionTimeout {
		log.Warn("--transaction-timeout is not below --session-timeout: after a crash, the partitions restart elsewhere before the brokers abort the crashed process's transaction, and read_committed readers (restores included) wait for it",
			"transaction_timeout", o.txnTimeout, "session_timeout", o.sessionTimeout)
	}
	log.Info("exactly-once: transactional producer", "transactional_id", id, "transaction_timeout", o.txnTimeout)
	return kafka.NewTransactor(kafka.TransactorConfig{
		Brokers: o.brokers, TransactionalID: id, Timeout: o.txnTimeout, Changelog: cl,
		Sarama: sc, Security: o.security, Logger: log, Registry: reg,
	})
}

// transactionalID is the transactional id transactor uses.
func (o *runOptions) transactionalID(db *store.DB) (string, error) {
	switch {
	case o.txnID != "":
		return o.txnID, nil
	case o.instanceID != "":
		return kafka.TransactionalID(o.group, o.instanceID), nil
	}
	instance, err := db.InstanceID()
	if err != nil {
		return "", fmt.Errorf("--state-dir %s: %w", o.stateDir, err)
	}
	return kafka.TransactionalID(o.group, instance), nil
}

// preflight connects once and checks that the input, output and dead-letter
// topics exist, so a typo fails with one clear message before anything
// starts (kafka.Run checks the input topic again, for a topic deleted since).
// It returns the input topic's partition count.
func (o *runOptions) preflight(sc *sarama.Config) (int, error) {
	c, err := securedSarama(sc, o.security)
	if err != nil {
		return 0, err
	}
	c.MetricRegistry = metrics.NewRegistry() // a throwaway client's metrics stay out of the served registry
	client, err := sarama.NewClient(o.brokers, c)
	if err != nil {
		return 0, fmt.Errorf("connect to --brokers %v: %w", o.brokers, kafka.ExplainConnect(err, o.security))
	}
	defer func() { _ = client.Close() }()
	counts, err := checkTopics(client, o.brokers, []topicRef{{"topic", o.topic}, {"output", o.output}, {"dlq", o.dlq}, {"alerts", o.velocity.alerts}})
	return counts[o.topic], err
}

// stateDirError explains a failure to open --state-dir. Pebble locks the
// directory (fcntl on its LOCK file) for as long as a process has it open:
// another process gets EAGAIN ("resource temporarily unavailable"), this
// process its own message.
func stateDirError(dir string, err error) error {
	if errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("--state-dir %s is in use by another differential process (it holds the directory's LOCK file): give every process its own --state-dir", dir)
	}
	return fmt.Errorf("open --state-dir %s: %w", dir, err)
}

func closeLogged(log *slog.Logger, what string, c interface{ Close() error }) {
	if err := c.Close(); err != nil {
		log.Warn("close "+what, "err", err)
	}
}

// wrappedTransactor is a Transactor whose outputs and dead letters go
// through out (hooks.wrapProducer), which sends them with the Transactor.
type wrappedTransactor struct {
	chain.Transactor
	out chain.Producer
}

func (w wrappedTransactor) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	w.out.Produce(ctx, msgs, done)
}
