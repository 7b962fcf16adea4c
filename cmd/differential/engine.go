package main

import (
	"log/slog"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainmetrics"
	"github.com/differential-dev/differential/processors/attribution"
)

// engineSettings are the chain settings of `run` (flags, embedded in
// runOptions) and `demo`.
type engineSettings struct {
	offsetDistance int64
	idleTimeout    time.Duration
	buffer         int
	keyConcurrency int
	// bufferBudget is the handoff buffers' budget in records, all
	// partitions together (0: none, --buffer each).
	bufferBudget   int
	gate           string // the followers' gate scope: "key" or "partition"
	commitInterval time.Duration
	shutdown       time.Duration
	output, dlq    string
	// alerts is the velocity stage's topic ("" = output), when the rules'
	// Velocity is enabled.
	alerts string
}

// defaultEngineSettings are the chain's defaults, one record at a time per
// stage, the attribution chain's key-scoped gate, and the default topic
// names.
func defaultEngineSettings() engineSettings {
	return engineSettings{
		idleTimeout: chain.DefaultIdleTimeout, buffer: chain.DefaultBufferSize, keyConcurrency: 1, gate: string(chain.GateKey),
		commitInterval: chain.DefaultCommitInterval, shutdown: chain.DefaultShutdownTimeout,
		output: "attributions", dlq: "events-dlq",
	}
}

// newAttributionChain builds the click -> install -> purchase chain for the
// rules (with the velocity stage when rules.Velocity is enabled, its metrics
// in reg) with the store, the producer, the shared metrics registry and the
// logger.
func newAttributionChain(rules attribution.Config, s engineSettings, st chain.Store, prod chain.Producer, reg metrics.Registry, log *slog.Logger, h hooks) (*chain.Chain, error) {
	opts := []chain.Option{
		chain.WithOffsetDistance(s.offsetDistance),
		chain.WithIdleTimeout(s.idleTimeout),
		chain.WithBufferSize(s.buffer),
		chain.WithBufferBudget(s.bufferBudget),
		chain.WithCommitInterval(s.commitInterval),
		chain.WithShutdownTimeout(s.shutdown),
		chain.WithStore(st),
		chain.WithProducer(prod),
		chain.WithOutputTopic(s.output),
		chain.WithDLQTopic(s.dlq),
		chainmetrics.Option(reg),
		chain.WithLogger(log),
	}
	wire := func(stages []chain.Stage) []chain.Stage {
		if vp := attribution.VelocityOf(stages); vp != nil && reg != nil {
			vp.RegisterMetrics(reg) // for the process's lifetime, like the registry
		}
		if h.wrapStages != nil {
			stages = h.wrapStages(stages)
		}
		return stages
	}
	w := attribution.Wiring{KeyConcurrency: s.keyConcurrency, Gate: chain.GateScope(s.gate), AlertsTopic: s.alerts, Stages: wire}
	ch, err := attribution.NewChainWith(rules, w,
		append(opts, h.chainOptions...)...)
	if err == nil && ch.ExactlyOnce() && reg != nil {
		chainmetrics.RegisterTxn(reg) // on /metrics from the start, not from the first transaction on
	}
	return ch, err
}

// gateValues are the values of --gate.
var gateValues = []string{string(chain.GateKey), string(chain.GatePartition)}

// gateUsage is the --gate flag's help.
const gateUsage = "the followers' gate scope: `key|partition` (key: an install waits only for its user's clicks, a purchase for its user's installs; partition: for every record before it; same outputs)"

// rebalanceTimeout leaves a revoked partition time to drain and commit
// before the group gives up on the member (kafka.Config.RebalanceTimeout).
func rebalanceTimeout(shutdown time.Duration) time.Duration {
	return max(time.Minute, shutdown+30*time.Second)
}
