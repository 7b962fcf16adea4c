package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
)

// Options configures Run. The CLI's flags map one to one to these fields;
// every zero value means the default stated on the field.
type Options struct {
	// Brokers are bootstrap addresses of a real cluster. Empty: an embedded,
	// in-process kfake cluster (internal/embedded) is started and closed.
	Brokers []string
	// Workloads to run, any of "A", "B", "C" (see Workloads). Default all.
	Workloads []string
	// Records overrides every workload's record count. Default per workload
	// (A 20,000, B 50,000, C 3,000 per grid point; Quick: 2,000, 5,000, 1,000).
	Records int
	// Partitions of the input topic of A and B. Default 8. C sweeps its own.
	Partitions int
	// Workers is W, the cap on records in processing at once, across all
	// partitions and stages, for both designs (A and B). Default 64. C sweeps
	// its own.
	Workers int
	// Seed of the workload generator. Default 1.
	Seed uint64
	// CostMedian is the median of A's and C's per-record cost (log-normal,
	// p99/p50 = 50), simulated by waiting. Default 1ms.
	CostMedian time.Duration
	// Quick runs small sizes (CI smoke test, under a minute): the same shape
	// of result, C on its diagonal only.
	Quick bool
	// Repeats runs each design this many times, alternating (chain,
	// micro-batch, chain, …); the run with the median throughput is
	// reported. Default 1.
	Repeats int
	// JSONPath and SVGPath, when set, receive the JSON report and the SVG
	// charts.
	JSONPath string
	SVGPath  string

	// BatchSize is the micro-batch poll size in records, across all
	// partitions. Default 500 (Kafka's max.poll.records default).
	BatchSize int
	// BatchLinger is how long a micro-batch poll waits for BatchSize records
	// after its first one. Default 100ms.
	BatchLinger time.Duration
	// BufferSize is the chain's handoff buffer per partition
	// (chain.WithBufferSize). Default chain.DefaultBufferSize (8192).
	BufferSize int
	// Gate is the follower gate scope of the chain design's attribution
	// chain (attribution.Wiring.Gate): chain.GateKey (the default; an
	// install waits only for its own user's clicks) or chain.GatePartition.
	Gate chain.GateScope
	// OneGate measures the chain with Gate only. By default workloads A and
	// C also measure it with the other scope (the row "chain/<scope>"), so
	// a run compares both.
	OneGate bool
	// PollingBufferSize is the tiny buffer of the polling-fallback
	// measurement (B): followers fall out of it and poll Kafka. Default 32.
	PollingBufferSize int
	// IdleTimeout is the chain's idle release (chain.WithIdleTimeout) and the
	// micro-batch's release of records it holds back for the event-time gate;
	// it only matters at the end of the input. Default 100ms.
	IdleTimeout time.Duration
	// LatencyLoad is the offered load of the latency phase, as a fraction of
	// the slower design's measured throughput. Default 0.5.
	LatencyLoad float64
	// LatencyDuration is how long the latency phase feeds the input whose
	// latency it measures (then up to 1s more, not measured). Default 6s
	// (Quick 1s).
	LatencyDuration time.Duration
	// NoLatency skips the latency phase (throughput, CPU, heap and
	// correctness only).
	NoLatency bool
	// MicroBatchKeyOrder also runs, for A and C, a micro-batch variant whose
	// workers keep only per-key order (not DESIGN §6's per-partition order),
	// to show how much of the difference is key parallelism.
	MicroBatchKeyOrder bool
	// Store is "pebble" (default: store.OpenPebble in a fresh directory
	// under Dir per design run) or "memory".
	Store string
	// Dir is where Pebble directories go. Default os.TempDir().
	Dir string
	// Timeout bounds one design run (stall detection). Default 10m.
	Timeout time.Duration
	// Velocity > 0: workload B also runs the chain with the velocity stage
	// (attribution.DefaultVelocity(Velocity)) after the plain chain in each
	// repeat of the throughput phase, checks it, and reports its cost per
	// record (see velocity.go). Default 0: not run.
	Velocity time.Duration
	// Progress receives one line per step (the CLI passes stderr). Default:
	// discard.
	Progress io.Writer
	// Logger receives the engine's and adapters' logs. Default: discard.
	Logger *slog.Logger
}

// Workloads are the workloads Run knows.
var Workloads = []string{"A", "B", "C"}

func (o Options) withDefaults() Options {
	if len(o.Workloads) == 0 {
		o.Workloads = slices.Clone(Workloads)
	}
	for i, w := range o.Workloads {
		o.Workloads[i] = strings.ToUpper(strings.TrimSpace(w))
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Partitions, 8)
	def(&o.Workers, 64)
	def(&o.Repeats, 1)
	def(&o.BatchSize, 500)
	def(&o.BufferSize, chain.DefaultBufferSize)
	def(&o.PollingBufferSize, 32)
	if o.Seed == 0 {
		o.Seed = 1
	}
	defDur(&o.CostMedian, defaultCost)
	defDur(&o.BatchLinger, 100*time.Millisecond)
	defDur(&o.IdleTimeout, 100*time.Millisecond)
	defDur(&o.Timeout, 10*time.Minute)
	if o.Quick {
		defDur(&o.LatencyDuration, time.Second)
	}
	defDur(&o.LatencyDuration, 6*time.Second)
	if o.LatencyLoad == 0 {
		o.LatencyLoad = 0.5
	}
	if o.Store == "" {
		o.Store = "pebble"
	}
	if o.Gate == "" {
		o.Gate = chain.GateKey
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads, w) {
			errs = append(errs, fmt.Errorf("bench: unknown workload %q (want A, B or C)", w))
		}
	}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("bench: "+format, args...))
		}
	}
	check(o.Records >= 0, "Records must be >= 0, got %d", o.Records)
	check(o.Partitions > 0, "Partitions must be > 0, got %d", o.Partitions)
	check(o.Workers > 0 && o.Workers <= chain.DefaultInFlight, "Workers must be in [1, %d] (the chain's in-flight window), got %d", chain.DefaultInFlight, o.Workers)
	check(o.Repeats > 0, "Repeats must be > 0, got %d", o.Repeats)
	check(o.BatchSize > 0, "BatchSize must be > 0, got %d", o.BatchSize)
	check(o.BatchLinger > 0, "BatchLinger must be > 0, got %v", o.BatchLinger)
	check(o.BufferSize >= 2, "BufferSize must be >= 2, got %d", o.BufferSize)
	check(o.PollingBufferSize >= 2, "PollingBufferSize must be >= 2, got %d", o.PollingBufferSize)
	check(o.IdleTimeout > 0, "IdleTimeout must be > 0, got %v", o.IdleTimeout)
	check(o.CostMedian >= 0, "CostMedian must be >= 0, got %v", o.CostMedian)
	check(o.LatencyLoad > 0 && o.LatencyLoad <= 1, "LatencyLoad must be in (0, 1], got %v", o.LatencyLoad)
	check(o.LatencyDuration > 0, "LatencyDuration must be > 0, got %v", o.LatencyDuration)
	check(o.Store == "pebble" || o.Store == "memory", "Store must be pebble or memory, got %q", o.Store)
	if _, err := chain.ParseGateScope(string(o.Gate)); err != nil {
		errs = append(errs, fmt.Errorf("bench: Gate: %w", err))
	}
	check(o.Velocity >= 0, "Velocity must be >= 0, got %v", o.Velocity)
	if o.Velocity > 0 {
		if err := velocityConfig(attributionConfig(), o.Velocity).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("bench: Velocity %v: %w", o.Velocity, err))
		}
	}
	return errors.Join(errs...)
}

// point is one measured configuration: a workload at one partition count and
// worker count.
type point struct {
	name    string // "A", "B", "C"
	wc      workload.Config
	workers int
	// keyOrder: also run the per-key micro-batch variant.
	keyOrder bool
	// gates: also run the chain with the other gate scope.
	gates bool
	// ceiling: also measure the raw consumer, the one-stage no-op chain and
	// the polling fallback on this point's input.
	ceiling bool
	// latencyScale scales LatencyDuration (C's nine points use half).
	latencyScale float64
}

// attributionConfig is the attribution configuration of every run: the
// defaults of DESIGN §5 with a record size limit the broker accepts (the
// workload's "oversized" records exceed it by one byte).
func attributionConfig() attribution.Config {
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = maxRecordBytes
	return cfg
}

const maxRecordBytes = 16 << 10

// baseWorkload is A's shape: Zipf users over 10,000 keys, half of the
// journeys on users of 2 hot partitions, log-normal costs.
func baseWorkload(seed uint64, records, partitions int, cost time.Duration) workload.Config {
	wc := workload.DefaultConfig()
	wc.Seed = seed
	wc.Records = records
	wc.Partitions = partitions
	wc.Users = 10_000
	wc.ZipfS = 1.1
	wc.HotPartitions = min(2, partitions)
	wc.HotFrac = 0.5
	wc.MaxRecordBytes = maxRecordBytes
	wc.CostMedian = cost
	return wc
}

// points expands the options into the configurations to measure, in order.
func (o Options) points() []point {
	records := func(full, quick int) int {
		switch {
		case o.Records > 0:
			return o.Records
		case o.Quick:
			return quick
		}
		return full
	}
	var pts []point
	for _, w := range o.Workloads {
		switch w {
		case "A":
			pts = append(pts, point{name: "A", wc: baseWorkload(o.Seed, records(20_000, 2_000), o.Partitions, o.CostMedian),
				workers: o.Workers, keyOrder: o.MicroBatchKeyOrder, gates: !o.OneGate, latencyScale: 1})
		case "B":
			pts = append(pts, point{name: "B", wc: baseWorkload(o.Seed, records(50_000, 5_000), o.Partitions, 0),
				workers: o.Workers, ceiling: true, latencyScale: 1})
		case "C":
			sizes := []int{4, 16, 64}
			for _, p := range sizes {
				for _, wk := range sizes {
					if o.Quick && p != wk {
						continue
					}
					pts = append(pts, point{name: "C", wc: baseWorkload(o.Seed, records(3_000, 1_000), p, o.CostMedian),
						workers: wk, keyOrder: o.MicroBatchKeyOrder, gates: !o.OneGate, latencyScale: 0.5})
				}
			}
		}
	}
	return pts
}

// defaultCost is the default median of A's and C's cost draws.
const defaultCost = time.Millisecond
