package main

import (
	"context"
	"flag"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// runOptions are the settings of `differential run`, from flags and the
// configuration file.
type runOptions struct {
	engineSettings // --offset-distance, --idle-timeout, --buffer, --buffer-budget, --key-concurrency, --gate, --commit-interval, --shutdown-timeout, --output, --dlq

	config         string
	printConfig    bool
	brokers        []string
	topic          string
	group          string
	stateDir       string
	stateCache     int64
	changelog      bool
	changelogTopic string
	guarantee      string
	metaVersion    string // --metadata-version: "4" (default), "3" or "2" (rolling-upgrade compatibility)
	txnTimeout     time.Duration
	txnID          string
	instanceID     string        // --instance-id: static membership
	leaveOnStop    bool          // --leave-on-stop: a static member leaves when it stops
	standbys       int           // --standby-replicas: warm copies of each partition's state on other members
	sessionTimeout time.Duration // --session-timeout
	heartbeat      time.Duration // --heartbeat-interval
	assignor       string
	start          string
	kafkaVersion   string
	lookback       time.Duration
	lateness       time.Duration
	retention      time.Duration
	dedupHorizon   time.Duration
	maxClockSkew   time.Duration
	maxRecordBytes int
	metricsAddr    string // --metrics-addr, another name for --http-addr
	http           httpFlags
	stallTimeout   time.Duration
	metaRefresh    time.Duration
	logFormat      string
	logLevel       string
	velocity       velocityOptions
	sec            securityFlags
	tracing        tracingFlags

	version  sarama.KafkaVersion // parsed kafkaVersion
	security kafka.Security      // from sec
	serving  httpServing         // from http and metricsAddr
	sources  sources             // where each flag's value came from
}

// --metadata-refresh's bounds: below a second every member asks the brokers
// for metadata several times a second for a change that comes rarely; above
// a day, sarama's default of ten minutes already was the complaint.
const (
	minMetadataRefresh = time.Second
	maxMetadataRefresh = 24 * time.Hour
)

// The group's session timeout and heartbeat interval by default. The
// session timeout is sarama's and Kafka's; the heartbeat is a third of
// sarama's 3 s, because a member learns of a rebalance only at its next
// heartbeat: a member that leaves (a clean stop) hands its partitions over
// within about one heartbeat interval instead of three seconds, for one
// small request per second per member.
const (
	defaultSessionTimeout = 10 * time.Second
	defaultHeartbeat      = time.Second
)

// maxKeyConcurrency is the chain's default in-flight window, which bounds a
// stage's key concurrency.
const maxKeyConcurrency = chain.DefaultInFlight

func defaultRunOptions() runOptions {
	a := attribution.DefaultConfig()
	return runOptions{
		engineSettings: defaultEngineSettings(),

		topic: "events", group: "differential-attribution",
		stateDir: "differential-state", stateCache: store.DefaultStateCacheBytes, changelog: true, assignor: assignorSticky,
		guarantee: defaultGuarantee, metaVersion: "4", txnTimeout: kafka.DefaultTransactionTimeout,
		start: "earliest", kafkaVersion: defaultKafkaVersion,
		lookback: a.Lookback, lateness: a.Lateness, retention: a.InstallRetention,
		maxClockSkew: a.MaxClockSkew, maxRecordBytes: a.MaxRecordBytes,
		sessionTimeout: defaultSessionTimeout, heartbeat: defaultHeartbeat,
		stallTimeout: time.Minute, metaRefresh: kafka.DefaultMetadataRefresh, logFormat: "text", logLevel: "info",
		tracing: defaultTracingFlags(),
	}
}

var runSynopsis = `Runs the click -> install -> purchase attribution chain (DESIGN.md "Attribution rules") over --topic
as a member of --group, writing attributed installs and purchases to --output
and invalid records to --dlq. Stops cleanly on SIGTERM/SIGINT (drain, final
commit, exit 0). With --velocity-window, a velocity stage between click and
install counts each user's clicks over that trailing window and writes a
click_velocity alert to --alerts when the count first exceeds
--velocity-threshold.

` + envHelp("DIFFERENTIAL_STATE_DIR")

func (o *runOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "YAML configuration `file`; keys are flag names")
	fs.BoolVar(&o.printConfig, "print-config", false, "print the effective configuration, each value with where it came from (flag, environment, file, default; secrets redacted), as a YAML file --config reads, and exit")
	fs.Var(listValue{&o.brokers}, "brokers", "Kafka bootstrap brokers, `host:port[,host:port...]` (required)")
	fs.StringVar(&o.topic, "topic", o.topic, "input `topic` (must exist)")
	fs.StringVar(&o.group, "group", o.group, "consumer `group` id")
	fs.StringVar(&o.output, "output", o.output, "output `topic` of attributed installs and purchases (must exist)")
	fs.StringVar(&o.dlq, "dlq", o.dlq, "dead-letter `topic` (must exist); empty: invalid records are only logged")
	fs.StringVar(&o.stateDir, "state-dir", o.stateDir, "`directory` of the Pebble window state (one per process)")
	fs.Int64Var(&o.stateCache, "state-cache-bytes", o.stateCache, "memory `bytes` for in-memory copies of the partitions' window state, all partitions together: a partition whose state fits is read from memory, the others from Pebble (same results, more CPU); 0: none")
	fs.BoolVar(&o.changelog, "changelog", o.changelog, "keep every partition's state in a changelog topic too, so that it follows the partition to any instance (false: state stays on this instance; run a single instance)")
	fs.StringVar(&o.changelogTopic, "changelog-topic", o.changelogTopic, "changelog `topic`, created if missing (default <group>.<topic>.state)")
	fs.Var(enumValue{&o.guarantee, []string{guaranteeExactlyOnce, guaranteeAtLeastOnce}}, "guarantee", "delivery guarantee: `exactly-once|at-least-once`. exactly-once: each commit interval is one Kafka transaction, and read_committed readers see every output once, ever; it needs --changelog and brokers that run transactions (Kafka 2.5+). at-least-once: no transactions; a crash repeats the outputs since the last commit, byte-identical (docs/guarantees.md)")
	fs.Var(enumValue{&o.metaVersion, []string{"2", "3", "4"}}, "metadata-version", "newest commit metadata `version` to write: 4 (dfl4: the idle releases decided at the live tail are recorded), 3 (no dfl4: what binaries before dfl4 read; at-least-once checkpoints carry the offsets completed above each position) or 2 (no dfl3: what binaries before dfl3 read; keeps the key gate's admission step). Use the version the oldest binary in a rolling group reads (docs/operations.md \"Upgrades\")")
	fs.Var(durationValue{&o.txnTimeout}, "transaction-timeout", "exactly-once: the `duration` after which the brokers abort a transaction left open (a crashed process's); above --commit-interval, below --session-timeout")
	fs.StringVar(&o.txnID, "transactional-id", o.txnID, "exactly-once: the producer's transactional `id` (default <group>.<--instance-id>, or <group>.<instance id kept in --state-dir> without one); two live processes must never share one")
	fs.StringVar(&o.instanceID, "instance-id", o.instanceID, "static group membership (Kafka's group.instance.id): this process's `id`, unique in the group and the same across its restarts; a restart within --session-timeout gets its partitions back without a rebalance. Empty: a dynamic member")
	fs.IntVar(&o.standbys, "standby-replicas", o.standbys, "how many members besides a partition's owner keep a warm copy of its state, by tailing its changelog into their --state-dir; a partition that moves goes to a member holding it warm when the balance allows, and restores only what was committed since. Needs --changelog. 0: none")
	fs.BoolVar(&o.leaveOnStop, "leave-on-stop", o.leaveOnStop, "with --instance-id: leave the group on a clean stop (SIGTERM) so the partitions move at once; false: the group keeps them for a restart within --session-timeout (a dynamic member always leaves)")
	fs.Var(durationValue{&o.sessionTimeout}, "session-timeout", "the `duration` after which the group removes a member it has not heard from (a killed or frozen process, a static member that stopped) and moves its partitions; within the brokers' group.min/max.session.timeout.ms")
	fs.Var(durationValue{&o.heartbeat}, "heartbeat-interval", "how often the member heartbeats, which is also how soon it learns of a rebalance (a member that left, one that joined): a `duration` below --session-timeout")
	fs.Var(enumValue{&o.assignor, []string{assignorSticky, assignorCooperative}}, "assignor", "how the group assigns partitions: `sticky|cooperative-sticky`")
	fs.Var(enumValue{&o.start, []string{"earliest", "latest"}}, "start", "where a partition without a committed offset begins: `earliest|latest`")
	fs.StringVar(&o.kafkaVersion, "kafka-version", o.kafkaVersion, "Kafka protocol `version` to speak")
	fs.Var(durationValue{&o.lookback}, "lookback", "the `duration` a click may be before an install and still be matched (e.g. 7d, 36h)")
	fs.Var(durationValue{&o.lateness}, "lateness", "the `duration` (in stream time) a click may arrive late and still be matched")
	fs.Var(durationValue{&o.retention}, "install-retention", "the `duration` after an install during which purchases are attributed to it")
	fs.Var(durationValue{&o.dedupHorizon}, "dedup-horizon", "the `duration` an event id is remembered for deduplication (0: the lookback)")
	fs.Var(durationValue{&o.maxClockSkew}, "max-clock-skew", "the `duration` an event time may be ahead of its Kafka timestamp")
	fs.IntVar(&o.maxRecordBytes, "max-record-bytes", o.maxRecordBytes, "largest record value accepted; larger ones are dead-lettered")
	fs.Int64Var(&o.offsetDistance, "offset-distance", o.offsetDistance, "safety distance in offsets between a stage and its leader")
	fs.Var(durationValue{&o.idleTimeout}, "idle-timeout", "the `duration` a caught-up leader must see no new record before its followers are released")
	fs.IntVar(&o.buffer, "buffer", o.buffer, "per-partition handoff buffer, in records")
	fs.IntVar(&o.bufferBudget, "buffer-budget", o.bufferBudget, "handoff buffers of all partitions together, in `records`: each partition gets an even share, at most --buffer and at least a few batches; 0: none (--buffer each)")
	fs.IntVar(&o.keyConcurrency, "key-concurrency", o.keyConcurrency, "records of different keys a stage may process at once (1: one at a time)")
	fs.Var(enumValue{&o.gate, gateValues}, "gate", gateUsage)
	fs.Var(durationValue{&o.commitInterval}, "commit-interval", "the `duration` between checkpoints (state persisted, offsets committed)")
	fs.Var(durationValue{&o.shutdown}, "shutdown-timeout", "the `duration` a stopping partition waits for its in-flight records")
	o.http.register(fs)
	o.http.registerAdvertised(fs)
	fs.StringVar(&o.metricsAddr, "metrics-addr", o.metricsAddr, "another name for --http-addr")
	fs.Var(durationValue{&o.stallTimeout}, "stall-timeout", "/healthz and /readyz report a stage that lags and makes no progress, a partition whose leader does not answer, or a commit the coordinator does not acknowledge, for this `duration`")
	fs.Var(durationValue{&o.metaRefresh}, "metadata-refresh", "how often the input's partition count is checked: partitions added to it are consumed within about twice this `duration` (plus a rebalance); one Metadata request per interval")
	registerLogFlags(fs, &o.logFormat, &o.logLevel, "log level: `debug|info|warn|error`")
	o.velocity.register(fs)
	o.sec.register(fs)
	o.tracing.register(fs)
}

// parseRunOptions reads flags, then the environment and the configuration
// file for what the flags did not set, then validates the result.
func parseRunOptions(args []string, e *env) (runOptions, error) {
	o := defaultRunOptions()
	fs := newFlagSet("run", runSynopsis, e)
	o.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	src, err := settle(fs, e, &o.config, flagNames(new(produceOptions).register))
	if err != nil {
		return o, err
	}
	o.sources = src
	o.velocity.noteSet(fs)
	o.tracing.noteSet(fs, e.lookupEnv)
	o.tracing.noteSources(src)
	o.alerts = o.velocity.alerts
	err = src.explain(o.validate())
	if o.printConfig {
		printConfig(e.stdout, fs, src)
	}
	return o, err
}

// validate reports the first invalid setting, naming its flag (which is
// also its configuration key).
func (o *runOptions) validate() error {
	if err := checkBrokers("brokers", o.brokers); err != nil {
		return err
	}
	for _, t := range []struct {
		flag, topic string
		required    bool
	}{{"topic", o.topic, true}, {"output", o.output, true}, {"dlq", o.dlq, false}} {
		if err := checkTopic(t.flag, t.topic, t.required); err != nil {
			return err
		}
	}
	switch {
	case o.group == "":
		return usagef("--group is required")
	case o.stateDir == "":
		return usagef("--state-dir is required")
	case o.stateCache < 0:
		return usagef("--state-cache-bytes must be >= 0, got %d", o.stateCache)
	case o.output == o.topic || o.dlq == o.topic:
		return usagef("--output and --dlq must differ from the input --topic %q", o.topic)
	case o.velocity.alerts != "" && (o.velocity.alerts == o.topic || o.velocity.alerts == o.dlq):
		return usagef("--alerts must differ from the input --topic %q and the --dlq %q", o.topic, o.dlq)
	case o.changelog && (o.changelogName() == o.topic || o.changelogName() == o.output || o.changelogName() == o.dlq || o.changelogName() == o.velocity.alerts):
		return usagef("--changelog-topic %q must differ from --topic, --output, --dlq and --alerts", o.changelogName())
	case o.lookback <= 0:
		return usagef("--lookback must be > 0, got %s", o.lookback)
	case o.lateness < 0:
		return usagef("--lateness must be >= 0, got %s", o.lateness)
	case o.retention <= 0:
		return usagef("--install-retention must be > 0, got %s", o.retention)
	case o.dedupHorizon < 0:
		return usagef("--dedup-horizon must be >= 0, got %s", o.dedupHorizon)
	case o.maxClockSkew < 0:
		return usagef("--max-clock-skew must be >= 0, got %s", o.maxClockSkew)
	case o.maxRecordBytes <= 0:
		return usagef("--max-record-bytes must be > 0, got %d", o.maxRecordBytes)
	case o.buffer < 2:
		return usagef("--buffer must be at least 2 records, got %d", o.buffer)
	case o.bufferBudget < 0:
		return usagef("--buffer-budget must be >= 0 records (0: none), got %d", o.bufferBudget)
	case o.offsetDistance < 0 || o.offsetDistance >= int64(o.buffer):
		return usagef("--offset-distance must be >= 0 and smaller than --buffer (%d), got %d", o.buffer, o.offsetDistance)
	case o.keyConcurrency < 1 || o.keyConcurrency > maxKeyConcurrency:
		return usagef("--key-concurrency must be in [1, %d], got %d", maxKeyConcurrency, o.keyConcurrency)
	case o.idleTimeout <= 0:
		return usagef("--idle-timeout must be > 0, got %s", o.idleTimeout)
	case o.commitInterval <= 0:
		return usagef("--commit-interval must be > 0, got %s", o.commitInterval)
	case o.shutdown <= 0:
		return usagef("--shutdown-timeout must be > 0, got %s", o.shutdown)
	case o.stallTimeout <= 0:
		return usagef("--stall-timeout must be > 0, got %s", o.stallTimeout)
	case o.metaRefresh < minMetadataRefresh || o.metaRefresh > maxMetadataRefresh:
		return usagef("--metadata-refresh must be between %s and %s, got %s (it is how often the input's partition count is checked)", minMetadataRefresh, maxMetadataRefresh, o.metaRefresh)
	case o.exactlyOnce() && !o.changelog:
		return usagef("--guarantee exactly-once (the default) needs --changelog (the committed state lives in the changelog; the state directory is a cache of it): drop --changelog=false, or use --guarantee at-least-once")
	case o.exactlyOnce() && o.txnTimeout <= o.commitInterval:
		return usagef("--transaction-timeout (%s) must exceed --commit-interval (%s): a transaction stays open for a commit interval", o.txnTimeout, o.commitInterval)
	case !o.exactlyOnce() && o.txnID != "":
		return usagef("--transactional-id is for --guarantee exactly-once")
	case o.standbys < 0:
		return usagef("--standby-replicas must be >= 0, got %d", o.standbys)
	case o.standbys > 0 && !o.changelog:
		return usagef("--standby-replicas needs --changelog (a standby tails the partition's changelog)")
	case o.leaveOnStop && o.instanceID == "":
		return usagef("--leave-on-stop is for a static member (--instance-id): a dynamic member always leaves on a clean stop")
	case o.sessionTimeout <= 0:
		return usagef("--session-timeout must be > 0, got %s", o.sessionTimeout)
	case o.heartbeat <= 0 || o.heartbeat >= o.sessionTimeout:
		return usagef("--heartbeat-interval must be > 0 and below --session-timeout (%s), got %s", o.sessionTimeout, o.heartbeat)
	}
	if o.instanceID != "" {
		if err := kafka.ValidateInstanceID(o.instanceID); err != nil {
			return usagef("--instance-id: %w", err)
		}
	}
	if err := o.velocity.validate(); err != nil {
		return err
	}
	if err := o.tracing.validate(); err != nil {
		return err
	}
	if o.changelog {
		if err := checkTopic("changelog-topic", o.changelogName(), true); err != nil {
			return usagef("%w (the default is <group>.<topic>.state; name one with --changelog-topic)", err)
		}
	}
	v, err := parseKafkaVersion(o.kafkaVersion)
	if err != nil {
		return err
	}
	o.version = v
	switch {
	case o.instanceID != "" && !v.IsAtLeast(sarama.V2_3_0_0):
		return usagef("--instance-id needs --kafka-version 2.3.0 or later (static membership), got %s", o.kafkaVersion)
	case o.leaveOnStop && !v.IsAtLeast(sarama.V2_4_0_0):
		return usagef("--leave-on-stop needs --kafka-version 2.4.0 or later (a leave by instance id), got %s", o.kafkaVersion)
	}
	if o.security, err = o.sec.security(); err != nil {
		return err
	}
	if o.serving, err = o.http.serving(o.metricsAddr); err != nil {
		return err
	}
	if err := o.attribution().Validate(); err != nil {
		return &usageError{err}
	}
	return nil
}

// The --guarantee values.
const (
	guaranteeExactlyOnce = "exactly-once"
	guaranteeAtLeastOnce = "at-least-once"
	defaultGuarantee     = guaranteeExactlyOnce
)

// exactlyOnce reports whether --guarantee is exactly-once.
func (o *runOptions) exactlyOnce() bool { return o.guarantee == guaranteeExactlyOnce }

// The --assignor values.
const (
	assignorSticky      = "sticky"
	assignorCooperative = "cooperative-sticky"
)

// changelogName is the changelog topic: --changelog-topic, or the default.
func (o *runOptions) changelogName() string {
	if o.changelogTopic != "" {
		return o.changelogTopic
	}
	return kafka.ChangelogTopic(o.group, o.topic)
}

// strategy is the group's balance strategy for --assignor.
func (o *runOptions) strategy() sarama.BalanceStrategy {
	if o.assignor == assignorCooperative {
		return sarama.NewBalanceStrategyCooperativeSticky()
	}
	return sarama.NewBalanceStrategySticky()
}

// attribution is the rules' configuration.
func (o *runOptions) attribution() attribution.Config {
	a := attribution.DefaultConfig()
	a.Lookback, a.Lateness, a.InstallRetention = o.lookback, o.lateness, o.retention
	a.DedupHorizon = o.dedupHorizon
	if a.DedupHorizon == 0 {
		a.DedupHorizon = o.lookback
	}
	a.MaxClockSkew, a.MaxRecordBytes = o.maxClockSkew, o.maxRecordBytes
	a.Velocity = o.velocity.config()
	return a
}

// runCmd is `differential run`.
func runCmd(ctx context.Context, args []string, e *env) error {
	o, err := parseRunOptions(args, e)
	if err != nil || o.printConfig {
		return err
	}
	return o.sources.explain(o.execute(ctx, e))
}
