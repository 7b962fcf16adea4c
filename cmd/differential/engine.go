package main

import (
	"log/slog"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// engineSettings are the chain settings `run` and `demo` share.
type engineSettings struct {
	rules          attribution.Config
	offsetDistance int64
	idleTimeout    time.Duration
	buffer         int
	keyConcurrency int
	commitInterval time.Duration
	shutdown       time.Duration
	output, dlq    string
	// alerts is the velocity stage's topic ("" = output), when
	// rules.Velocity is enabled.
	alerts string
}

// newAttributionChain builds the click -> install -> purchase chain (with
// the velocity stage when s.rules.Velocity is enabled) with the store, the
// producer, the shared metrics registry and the logger.
func newAttributionChain(s engineSettings, st chain.Store, prod chain.Producer, reg metrics.Registry, log *slog.Logger, h hooks) (*chain.Chain, error) {
	stages := attribution.Chain(s.rules, attribution.AlertsTopic(s.alerts))
	if vp := attribution.VelocityOf(stages); vp != nil && reg != nil {
		vp.RegisterMetrics(reg) // for the process's lifetime, like the registry
	}
	for i := range stages {
		stages[i].KeyConcurrency = s.keyConcurrency
	}
	if h.wrapStages != nil {
		stages = h.wrapStages(stages)
	}
	opts := []chain.Option{
		chain.WithLateness(s.rules.Lateness), // the gate must use the rules' lateness (attribution.Chain)
		chain.WithOffsetDistance(s.offsetDistance),
		chain.WithIdleTimeout(s.idleTimeout),
		chain.WithBufferSize(s.buffer),
		chain.WithBatchSize(min(256, s.buffer)),
		chain.WithCommitInterval(s.commitInterval),
		chain.WithShutdownTimeout(s.shutdown),
		chain.WithStore(st),
		chain.WithProducer(prod),
		chain.WithOutputTopic(s.output),
		chain.WithDLQTopic(s.dlq),
		chain.WithMetrics(reg),
		chain.WithLogger(log),
	}
	return chain.New(stages, attribution.Decoder(s.rules), append(opts, h.chainOptions...)...)
}

// rebalanceTimeout leaves a revoked partition time to drain and commit
// before the group gives up on the member (kafka.Config.RebalanceTimeout).
func rebalanceTimeout(shutdown time.Duration) time.Duration {
	return max(time.Minute, shutdown+30*time.Second)
}
