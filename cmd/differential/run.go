package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// execute runs the chain until ctx ends (a clean stop: kafka.Run drains
// every partition and makes the final commits) or a fatal error.
func (o *runOptions) execute(ctx context.Context, e *env) error {
	log := newLogger(e.stderr, o.logFormat, o.logLevel)
	if o.logLevel == "debug" {
		// sarama's own client log (connections, subscriptions, rebalances)
		// is the first thing to read when a partition stops moving.
		saramaLog.Store(log.With("component", "sarama"))
		defer saramaLog.Store(nil)
	}
	sc := baseSarama(o.version, o.maxRecordBytes)
	if err := o.preflight(sc); err != nil {
		return err
	}
	// One registry for everything: the engine's gauges and the metrics of
	// every sarama client (consumer group, commits, pollers, producer).
	reg := metrics.NewRegistry()

	db, err := store.OpenPebble(o.stateDir, store.WithLogger(log))
	if err != nil {
		return fmt.Errorf("open --state-dir %s: %w", o.stateDir, err)
	}
	defer closeLogged(log, "state store", db)
	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: o.brokers, Sarama: sc, Logger: log, Registry: reg})
	if err != nil {
		return err
	}
	// Closed after kafka.Run returned: every output of a committed record
	// is acknowledged by then, so Close has nothing left to flush.
	defer closeLogged(log, "producer", prod)
	var out chain.Producer = prod
	if e.hooks.wrapProducer != nil {
		out = e.hooks.wrapProducer(prod)
	}
	ch, err := newAttributionChain(o.engine(), db, out, reg, log, e.hooks)
	if err != nil {
		return &usageError{err}
	}
	if o.metricsAddr != "" {
		health := &metricshttp.Health{Stats: ch.Stats, Joined: groupJoined(reg, o.group), StallTimeout: o.stallTimeout, Now: e.hooks.now}
		stop, err := serveMetrics(o.metricsAddr, reg, health, log, e.hooks.metricsListening)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("differential run starting", "brokers", o.brokers, "topic", o.topic, "group", o.group,
		"output", o.output, "dlq", o.dlq, "state_dir", o.stateDir, "key_concurrency", o.keyConcurrency)
	err = kafka.Run(ctx, ch, kafka.Config{
		Brokers: o.brokers, Topic: o.topic, Group: o.group, Start: o.start,
		Sarama: sc, Logger: log, Registry: reg,
		RebalanceTimeout: rebalanceTimeout(o.shutdown),
	})
	if err != nil {
		return err
	}
	log.Info("differential run stopped cleanly")
	return nil
}

func (o *runOptions) engine() engineSettings {
	return engineSettings{
		rules: o.attribution(), offsetDistance: o.offsetDistance, idleTimeout: o.idleTimeout,
		buffer: o.buffer, keyConcurrency: o.keyConcurrency, commitInterval: o.commitInterval,
		shutdown: o.shutdown, output: o.output, dlq: o.dlq,
	}
}

// preflight connects once and checks that the input, output and dead-letter
// topics exist, so a typo fails with one clear message before anything
// starts (kafka.Run checks the input topic again, for a topic deleted since).
func (o *runOptions) preflight(sc *sarama.Config) error {
	c := *sc
	c.MetricRegistry = metrics.NewRegistry() // a throwaway client's metrics stay out of the served registry
	client, err := sarama.NewClient(o.brokers, &c)
	if err != nil {
		return fmt.Errorf("connect to --brokers %v: %w", o.brokers, err)
	}
	defer func() { _ = client.Close() }()
	_, err = checkTopics(client, o.brokers, []topicRef{{"topic", o.topic}, {"output", o.output}, {"dlq", o.dlq}})
	return err
}

func closeLogged(log *slog.Logger, what string, c interface{ Close() error }) {
	if err := c.Close(); err != nil {
		log.Warn("close "+what, "err", err)
	}
}
