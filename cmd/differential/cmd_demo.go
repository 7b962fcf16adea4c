package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

type demoOptions struct {
	records        int
	partitions     int
	seed           uint64
	keyConcurrency int
	bufferBudget   int
	gate           string
	maxRecordBytes int
	heavyKey       float64
	logFormat      string
	logLevel       string
	velocity       velocityOptions
	guarantee      string
	httpAddr       string
}

// Demo topics and group on the embedded broker.
const (
	demoInput  = "events"
	demoOutput = "attributions"
	demoDLQ    = "events-dlq"
	demoGroup  = "differential-demo"
	// demoAlerts is the alerts topic with --velocity-window (unless --alerts).
	demoAlerts = "velocity-alerts"
	// demoClickSpam is the workload's ClickSpamFrac with --velocity-window,
	// so that the velocity stage has click spam to alert on.
	demoClickSpam = 0.002
)

const demoSynopsis = `Starts an in-process Kafka broker, generates an attribution workload (skewed
users, late clicks, duplicates, malformed records), produces it, runs the
click -> install -> purchase chain on it (kafka.Run, Pebble state in a temporary
directory) with live progress on stderr, and when every stage of every
partition has reached the end, prints a report and verifies every output and
dead letter against the reference model. Exits 1 if the verification fails.
With --velocity-window, the chain has the velocity stage, the workload has
click-spam bursts, and the alerts are verified too.`

// demoIdleTimeout is the demo engine's idle timeout; its check gives the
// model the same one.
const demoIdleTimeout = 250 * time.Millisecond

// maxDemoPartitions bounds --partitions: the embedded broker holds every
// partition of the demo's topics in the process.
const maxDemoPartitions = 1024

func demoCmd(ctx context.Context, args []string, e *env) error {
	o := demoOptions{records: 100_000, partitions: 8, seed: 1, keyConcurrency: 1, gate: string(chain.GateKey), maxRecordBytes: attribution.DefaultMaxRecordBytes,
		logFormat: "text", logLevel: "error", guarantee: defaultGuarantee}
	fs := newFlagSet("demo", demoSynopsis, e)
	fs.IntVar(&o.records, "records", o.records, "number of generated records")
	fs.IntVar(&o.partitions, "partitions", o.partitions, "partitions of the input and output topics")
	fs.Uint64Var(&o.seed, "seed", o.seed, "workload seed")
	fs.IntVar(&o.keyConcurrency, "key-concurrency", o.keyConcurrency, "records of different keys a stage may process at once")
	fs.IntVar(&o.bufferBudget, "buffer-budget", 0, "handoff buffers of all partitions together, in `records` (0: none); see run --buffer-budget")
	fs.Var(enumValue{&o.gate, gateValues}, "gate", gateUsage)
	fs.IntVar(&o.maxRecordBytes, "max-record-bytes", o.maxRecordBytes, "decoder limit; the workload's oversized records are this +1 bytes")
	fs.Var(enumValue{&o.guarantee, []string{guaranteeExactlyOnce, guaranteeAtLeastOnce}}, "guarantee", "delivery guarantee: `exactly-once|at-least-once` (exactly-once: transactions, a changelog, and the outputs read back read_committed)")
	fs.Float64Var(&o.heavyKey, "heavy-key", 0, "`share` of its partition's records given to one heavy key (the all-zeros advertising ID), in [0, 1)")
	fs.StringVar(&o.httpAddr, "http-addr", "", "serve the live view (/), its JSON, /metrics and /healthz on this `host:port` while the demo runs (no host: 127.0.0.1); empty: off")
	registerLogFlags(fs, &o.logFormat, &o.logLevel, "log `level` (info shows every rebalance, commit error and dead letter)")
	o.velocity.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.velocity.noteSet(fs)
	if err := o.velocity.validate(); err != nil {
		return err
	}
	if a := o.velocity.alerts; a == demoInput || a == demoDLQ {
		return usagef("--alerts must differ from the demo's input and dead-letter topics (%s, %s)", demoInput, demoDLQ)
	}
	switch {
	case o.records < 1:
		return usagef("--records must be >= 1, got %d", o.records)
	case o.partitions < 1 || o.partitions > maxDemoPartitions:
		return usagef("--partitions must be in [1, %d], got %d", maxDemoPartitions, o.partitions)
	case o.bufferBudget < 0:
		return usagef("--buffer-budget must be >= 0 records (0: none), got %d", o.bufferBudget)
	case o.keyConcurrency < 1 || o.keyConcurrency > maxKeyConcurrency:
		return usagef("--key-concurrency must be in [1, %d], got %d", maxKeyConcurrency, o.keyConcurrency)
	case o.maxRecordBytes < 1024:
		return usagef("--max-record-bytes must be >= 1024, got %d", o.maxRecordBytes)
	case o.heavyKey < 0 || o.heavyKey >= 1:
		return usagef("--heavy-key must be in [0, 1), got %v", o.heavyKey)
	}
	if o.httpAddr != "" {
		addr, err := listenAddr(o.httpAddr)
		if err != nil {
			return err
		}
		o.httpAddr = addr
	}
	return o.execute(ctx, e)
}

// demoResult is what the report shows.
type demoResult struct {
	recs      []workload.Record
	generated time.Duration
	produced  time.Duration
	processed time.Duration // group join to the last stage's last record
	stopped   time.Duration // drain, final commit, leave the group
	verified  time.Duration // read back and compare
	total     time.Duration
	v         *reference.Report
	counts    demoCounts    // the records reconciled with the model's results
	horizon   time.Duration // the rules' dedup horizon
}

func (o *demoOptions) execute(ctx context.Context, e *env) error {
	began := time.Now()
	log := newLogger(e.stderr, o.logFormat, o.logLevel)
	defer flushLog(log)
	w := e.stderr
	p := int32(o.partitions)
	topics := []embedded.Opt{embedded.Topic(demoInput, p), embedded.Topic(demoOutput, p), embedded.Topic(demoDLQ, 1)}
	alerts := o.alertsTopic()
	if alerts != "" && alerts != demoOutput {
		topics = append(topics, embedded.Topic(alerts, p))
	}
	cluster, err := embedded.Start(topics...)
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	fmt.Fprintf(w, "embedded broker on %s: topics %s and %s (%d partitions each), %s (1)\n",
		brokers[0], demoInput, demoOutput, p, demoDLQ)

	wcfg := workload.DefaultConfig()
	wcfg.Records, wcfg.Partitions, wcfg.Seed, wcfg.Topic, wcfg.MaxRecordBytes = o.records, o.partitions, o.seed, demoInput, o.maxRecordBytes
	wcfg.HeavyKeyShare = o.heavyKey
	if alerts != "" {
		wcfg.ClickSpamFrac = demoClickSpam
		fmt.Fprintf(w, "velocity stage on (%s); alerts to %s\n", o.velocity.describe(), alerts)
	}
	t := time.Now()
	res := demoResult{recs: workload.Generate(wcfg)}
	res.generated = time.Since(t)
	fmt.Fprintf(w, "generated %s records (seed %d): %s\n", count(len(res.recs)), o.seed, kindSummary(res.recs))

	rules := attribution.DefaultConfig()
	rules.MaxRecordBytes = o.maxRecordBytes
	rules.Velocity = o.velocity.config()
	rules.IdleTimeout = demoIdleTimeout // the model's horizons: the engine's idle timeout
	sc := baseSarama(sarama.V3_0_0_0, o.maxRecordBytes)
	// The topic is fresh: every record lands at its planned offset, so the
	// input partitions are workload.Split of the records.
	out, err := workload.Write(ctx, workload.WriterConfig{Brokers: brokers, Sarama: sc, Topic: demoInput, Exact: true,
		Progress: produceProgress(w, len(res.recs))}, res.recs)
	if err != nil {
		return err
	}
	res.produced = out.Took
	fmt.Fprintf(w, "produced %s records in %s\n", count(out.Records), out.Took.Round(time.Millisecond))

	inputs := workload.Split(res.recs, o.partitions)
	if err := o.process(ctx, e, log, brokers, sc, rules, inputs, &res); err != nil {
		return err
	}
	t = time.Now()
	outputs, dead, err := readResults(ctx, brokers, sc, alerts, o.guarantee == guaranteeExactlyOnce)
	if err != nil {
		return err
	}
	if e.hooks.tamperOutputs != nil {
		outputs = e.hooks.tamperOutputs(outputs)
	}
	// The demo runs without crashes or moves: every output exactly once,
	// one key's outputs of a stage in offset order (stages may be
	// key-parallel, --key-concurrency).
	model := reference.Expect(inputs, rules)
	res.v = model.Check(outputs, dead, reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	res.counts = countDemo(res.recs, model.Results(), rules)
	res.horizon = rules.DedupHorizon
	res.verified = time.Since(t)
	res.total = time.Since(began)
	o.report(e.stdout, &res)
	if !res.v.OK() {
		return errors.New("verification failed: the outputs differ from the reference model's (see the report)")
	}
	return nil
}

// process runs the chain through kafka.Run until every stage of every
// partition has completed the partition's last record, then stops it
// cleanly (drain, final commit), recording the times in res.
func (o *demoOptions) process(ctx context.Context, e *env, log *slog.Logger, brokers []string, sc *sarama.Config,
	rules attribution.Config, inputs [][]chain.Record, res *demoResult) error {
	dir, err := os.MkdirTemp("", "differential-demo-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	db, err := store.OpenPebble(dir, store.WithLogger(log))
	if err != nil {
		return fmt.Errorf("open state in %s: %w", dir, err)
	}
	defer closeLogged(log, "state store", db)
	reg := metrics.NewRegistry()
	h := e.hooks
	var prod chain.Producer
	var txns *liveview.TxnTracker // the live view's exactly-once cycles
	if o.guarantee == guaranteeExactlyOnce {
		cl, err := kafka.NewChangelog(ctx, kafka.ChangelogConfig{Brokers: brokers, InputTopic: demoInput, Group: demoGroup,
			Sarama: sc, Logger: log, Registry: reg})
		if err != nil {
			return err
		}
		defer closeLogged(log, "changelog", cl)
		tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: brokers, TransactionalID: demoGroup + ".demo",
			Changelog: cl, Sarama: sc, Logger: log, Registry: reg})
		if err != nil {
			return err
		}
		// Closed after kafka.Run returned (deferred before its wait).
		defer closeLogged(log, "transactional producer", tx)
		h.chainOptions = append([]chain.Option{chain.WithChangelog(cl), chain.WithExactlyOnce(tx)}, h.chainOptions...)
		if o.httpAddr != "" {
			txns = liveview.NewTxnTracker(nil)
			h.chainOptions = append(h.chainOptions, txns.Option())
		}
	} else {
		p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Sarama: sc, Logger: log, Registry: reg})
		if err != nil {
			return err
		}
		defer closeLogged(log, "producer", p)
		prod = p
	}
	// The chain's defaults, but a short idle release: the end of the
	// generated log should not wait a second.
	settings := defaultEngineSettings()
	settings.idleTimeout, settings.keyConcurrency, settings.gate = demoIdleTimeout, o.keyConcurrency, o.gate
	settings.bufferBudget = o.bufferBudget
	settings.output, settings.dlq, settings.alerts = demoOutput, demoDLQ, o.alertsTopic()
	ch, err := newAttributionChain(rules, settings, db, prod, reg, log, h)
	if err != nil {
		return err
	}
	if o.httpAddr != "" {
		// Stopped when process returns: after the last stage's last record
		// and the clean stop.
		stopHTTP, err := o.serveLiveView(ch, reg, txns, settings, log, e)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	ends := make([]int64, len(inputs))
	for i, recs := range inputs {
		ends[i] = int64(len(recs))
	}

	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	var runErr error
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		runErr = kafka.Run(runCtx, ch, kafka.Config{Brokers: brokers, Topic: demoInput, Group: demoGroup,
			Sarama: sc, Logger: log, Registry: reg})
	}()
	// Whatever happens, Run has returned before the store and the producer
	// it uses are closed (deferred above, so run after this).
	defer func() {
		stop()
		<-runDone
	}()
	waitErr := waitProcessed(ctx, ch, ends, runDone, newProgress(e.stderr, ch.StageNames(), start))
	res.processed = time.Since(start)
	stop()
	<-runDone
	switch {
	case runErr != nil:
		return fmt.Errorf("the consumer failed: %w", runErr)
	case waitErr != nil:
		return waitErr
	}
	res.stopped = time.Since(start) - res.processed
	return nil
}

// serveLiveView serves the live view, /metrics and /healthz of the demo's
// chain on --http-addr, open to whoever reaches the address.
func (o *demoOptions) serveLiveView(ch *chain.Chain, reg metrics.Registry, txns *liveview.TxnTracker, s engineSettings, log *slog.Logger, e *env) (stop func(), err error) {
	health := &metricshttp.Health{Stats: ch.Stats, StallTimeout: time.Minute, Now: e.hooks.now}
	view := liveview.New(liveview.Config{
		Stats: ch.Stats, Stages: ch.StageNames(), Health: health.Check, Txn: txns, OffsetDistance: s.offsetDistance,
		Info: []liveview.Field{{Name: "demo", Value: fmt.Sprintf("%s records, seed %d", count(o.records), o.seed)},
			{Name: "group", Value: demoGroup}, {Name: "guarantee", Value: o.guarantee}, {Name: "gate", Value: o.gate}},
	})
	mo := metricshttp.Options{Topics: []string{demoInput, demoOutput, demoDLQ, s.alerts, kafka.ChangelogTopic(demoGroup, demoInput)},
		Stats: ch.Stats, Stages: ch.StageNames()}
	srv := httpServer{httpServing: httpServing{addr: o.httpAddr, guard: httpauth.New("", false)}, reg: reg, mo: mo, health: health, view: view}
	listening := func(addr string) {
		fmt.Fprintf(e.stderr, "live view on http://%s/ while the demo runs\n", addr)
		if e.hooks.metricsListening != nil {
			e.hooks.metricsListening(addr)
		}
	}
	return serveHTTP(srv, log, listening)
}

// waitProcessed polls Stats until every stage of every partition is at the
// partition's end, showing progress about once a second. It fails if ctx
// ends or Run returns first.
func waitProcessed(ctx context.Context, ch *chain.Chain, ends []int64, runDone <-chan struct{}, prog *progress) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastShow := time.Now()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-runDone:
			return errors.New("the consumer stopped before the end of the input")
		case now := <-tick.C:
			stats := ch.Stats()
			done := allAtEnd(stats, ends)
			if done || now.Sub(lastShow) >= time.Second {
				prog.show(stats, now)
				lastShow = now
			}
			if done {
				return nil
			}
		}
	}
}

// allAtEnd reports whether every stage of every partition has position ==
// the partition's end (partitions without records are done by definition).
func allAtEnd(stats []chain.PartitionStats, ends []int64) bool {
	seen := 0
	for _, ps := range stats {
		if int(ps.Partition) >= len(ends) || ends[ps.Partition] == 0 {
			continue
		}
		if len(ps.Stages) == 0 {
			return false
		}
		for _, s := range ps.Stages {
			if s.Position != ends[ps.Partition] {
				return false
			}
		}
		seen++
	}
	want := 0
	for _, e := range ends {
		if e > 0 {
			want++
		}
	}
	return seen == want
}

// alertsTopic is the demo's alerts topic, "" without the velocity stage.
func (o *demoOptions) alertsTopic() string {
	switch {
	case o.velocity.window <= 0:
		return ""
	case o.velocity.alerts != "":
		return o.velocity.alerts
	}
	return demoAlerts
}

// readResults reads the output and dead-letter topics back, and the alerts
// topic (when not "" or the output topic) with the outputs.
func readResults(ctx context.Context, brokers []string, sc *sarama.Config, alerts string, readCommitted bool) (outputs, dead []reference.Written, err error) {
	c := *sc
	c.MetricRegistry = metrics.NewRegistry()

	c.Consumer.MaxWaitTime = 20 * time.Millisecond // closing a partition consumer waits for its fetch
	client, err := sarama.NewClient(brokers, &c)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if outputs, err = readTopic(ctx, client, demoOutput, readCommitted); err != nil {
		return nil, nil, err
	}
	if dead, err = readTopic(ctx, client, demoDLQ, readCommitted); err != nil {
		return nil, nil, err
	}
	if alerts != "" && alerts != demoOutput {
		more, err := readTopic(ctx, client, alerts, readCommitted)
		if err != nil {
			return nil, nil, err
		}
		outputs = append(outputs, more...)
	}
	return outputs, dead, nil
}

func (o *demoOptions) report(w io.Writer, r *demoResult) {
	v := r.v
	n := len(r.recs)
	guarantee := "at-least-once"
	if o.guarantee == guaranteeExactlyOnce {
		guarantee = "exactly-once (outputs read back read_committed)"
	}
	fmt.Fprintf(w, "\nDifferential demo: %s records, %d partitions, seed %d, key concurrency %d, %s gate, %s\n",
		count(n), o.partitions, o.seed, o.keyConcurrency, o.gate, guarantee)
	r.counts.report(w, r.horizon, v.Installs.Distinct()+v.Purchases.Distinct(), v.Installs.Distinct(), v.Purchases.Distinct(), v.DeadLetters.Distinct())
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	stages := 3
	if o.velocity.window > 0 {
		stages = 4
	}
	fmt.Fprintf(w, "  throughput      %s records/s through %d stages: processed in %s, from the group join to the last stage's last record\n",
		rate(float64(n)/r.processed.Seconds()), stages, ms(r.processed))
	fmt.Fprintf(w, "  timings         generate %s, produce %s, process %s, stop %s, read back and verify %s; total %s\n",
		ms(r.generated), ms(r.produced), ms(r.processed), ms(r.stopped), ms(r.verified), ms(r.total))
	if o.velocity.window > 0 {
		fmt.Fprintf(w, "  alerts          %s click-velocity alerts to %s (%s)\n", count(v.Alerts.Distinct()), o.alertsTopic(), o.velocity.describe())
	}
	fmt.Fprintf(w, "  verification    %s\n", v.Summary())
}
