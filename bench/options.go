package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
)

// Options configures Run. The CLI's flags map one to one to these fields
// (docs/cli.md gives each flag's meaning); every zero value means the
// default stated on the field. docs/benchmark.md describes the method.
type Options struct {
	// Brokers are bootstrap addresses of a real cluster. Empty: an embedded,
	// in-process kfake cluster (internal/embedded) is started and closed.
	Brokers []string
	// Workloads to run, any of Workloads ("A", "B", "C"). Default all.
	Workloads []string
	// Duration is the least measured duration of every throughput run: each
	// design run consumes a prefix of the point's stream sized by its own
	// throughput to last this long. Default 12.5 × CommitInterval; at least
	// 10 ×, so that the chain pays ten checkpoints and commits in every run.
	Duration time.Duration
	// CommitInterval is the chain's checkpoint and commit interval in every
	// run. Default 200ms (Quick 50ms).
	CommitInterval time.Duration
	// Records, when set, fixes every design run's prefix instead of sizing
	// it by time; runs shorter than Duration are then not steady.
	Records int
	// Partitions of A's and B's input (default 8), and Workers the cap W on
	// records in processing at once across all partitions and stages, for
	// every design (default 64). C sweeps both.
	Partitions, Workers int
	// KeyConcurrency is the chain's key concurrency per stage on A and B
	// (attribution.Wiring.KeyConcurrency), within W. Default W.
	KeyConcurrency int
	// Seed of the workload generator. Default 1.
	Seed uint64
	// CostMedian is the median of A's and C's simulated per-record cost
	// (log-normal, p99/p50 = 50, a timer wait). Default 1ms.
	CostMedian time.Duration
	// Quick runs short (CI's smoke test): CommitInterval 50ms, a two-size
	// sweep, C at P=W=16 only, a 1s latency phase.
	Quick bool
	// FullGrid runs C over all nine P × W points, not only P = W.
	FullGrid bool
	// Repeats runs the chain and both baselines this many times,
	// alternating; the run with the median throughput is reported. Default 1.
	Repeats int
	// JSONPath, when set, receives the JSON report; its folder is created,
	// and checked writable, before the run starts.
	JSONPath string
	// BatchSize is the micro-batch baseline's poll size in records (default
	// 500, Kafka's max.poll.records), and BatchLinger how long its poll
	// waits for a full batch (default 100ms; the strongest does not linger).
	BatchSize   int
	BatchLinger time.Duration
	// SweepBatchSizes are the batch sizes the strongest micro-batch is
	// measured at (per workload; C uses A's choice); the fastest is the
	// strongest. A size whose one batch would last more than 2 × Duration
	// is skipped. Default 500, 2000, 8000, 32000 (Quick 500, 4000).
	SweepBatchSizes []int
	// BufferSize is the chain's handoff buffer per partition. Default
	// chain.DefaultBufferSize.
	BufferSize int
	// Gate is the chain's follower gate scope: chain.GateKey (default) or
	// chain.GatePartition. Unless OneGate, A and C also measure the chain
	// under the other scope (the row "chain (<scope> gate)").
	Gate    chain.GateScope
	OneGate bool
	// PollingBufferSize is the tiny buffer of B's polling-fallback run,
	// whose followers fall out of it and poll Kafka. Default 32.
	PollingBufferSize int
	// IdleTimeout is both designs' idle release; it matters only at the end
	// of the input. Default 100ms (EOSCost 500ms).
	IdleTimeout time.Duration
	// LatencyLoad is the latency phase's offered load, a fraction of the
	// slower design's throughput in each comparison (default 0.5), and
	// LatencyDuration how long it feeds the measured input (default 6s,
	// Quick 1s); NoLatency skips the phase.
	LatencyLoad     float64
	LatencyDuration time.Duration
	NoLatency       bool
	// Store is "pebble" (default: a fresh directory under Dir per design
	// run; Dir defaults to os.TempDir()) or "memory".
	Store, Dir string
	// Timeout bounds one design run (stall detection). Default 10m.
	Timeout time.Duration
	// Velocity > 0: B also runs the chain with the velocity stage over this
	// window after the plain chain in each repeat, checked, and reports its
	// cost per record (velocity.go). Default 0: not run.
	Velocity time.Duration
	// EOSCost measures the exactly-once cost table instead of the design
	// comparison: for workloads B and A (the default), each of
	// CommitIntervals and Guarantees, the chain with Pebble state and a
	// changelog in a throughput run sized by time and a latency run, all
	// checked (exactly-once's outputs read read_committed). Duration then
	// defaults to 5s. Guarantees: default both; CommitIntervals: default
	// 50ms, 100ms, 250ms, 500ms, 1s (Quick the first three).
	EOSCost         bool
	Guarantees      []string
	CommitIntervals []time.Duration
	// FloorOnly measures B's CPU floor (CPUFloor) and, with Cores, the
	// cores sweep, with no design comparison (workloads: B only). Every
	// run of B measures the floor anyway.
	FloorOnly bool
	// Cores is the cores sweep of B: the chain and the strongest
	// micro-batch at each of these GOMAXPROCS values, each in [1,
	// runtime.NumCPU()] (CoresPoint). Default: none.
	Cores []int
	// Progress receives one line per step (the CLI passes stderr), Logger
	// the engine's logs. Default: discard.
	Progress io.Writer
	Logger   *slog.Logger

	// asOfReads turns the chain's reads as of a record's horizon on
	// (chain.WithAsOfReads), which the attribution chain leaves off: what
	// they cost (BenchmarkWorkloadB1s_ChainAsOfReads).
	asOfReads bool
	// checkpoints is how many checkpoints and commits a chain's run must
	// hold to be steady (0: minCheckpoints). A test of the harness's
	// machinery lowers it: an exactly-once cycle lasts longer than a short
	// commit interval, so ten of them need inputs many times longer.
	checkpoints int
}

// steadyCheckpoints is the checkpoints and commits a chain's run must hold.
func (o Options) steadyCheckpoints() int { return cmp.Or(o.checkpoints, minCheckpoints) }

// Workloads are the workloads Run knows.
var Workloads = []string{"A", "B", "C"}

func (o Options) withDefaults() Options {
	if len(o.Workloads) == 0 {
		o.Workloads = slices.Clone(Workloads)
		if o.FloorOnly {
			o.Workloads = []string{"B"}
		}
		if o.EOSCost {
			o.Workloads = []string{"B", "A"}
		}
	}
	if o.EOSCost {
		if len(o.Guarantees) == 0 {
			o.Guarantees = slices.Clone(Guarantees)
		}
		if len(o.CommitIntervals) == 0 {
			o.CommitIntervals = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}
			if o.Quick {
				o.CommitIntervals = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}
			}
		}
	}
	for i, w := range o.Workloads {
		o.Workloads[i] = strings.ToUpper(strings.TrimSpace(w))
	}
	o.Partitions, o.Workers, o.Repeats, o.BatchSize = cmp.Or(o.Partitions, 8), cmp.Or(o.Workers, 64), cmp.Or(o.Repeats, 1), cmp.Or(o.BatchSize, 500)
	if len(o.SweepBatchSizes) == 0 {
		o.SweepBatchSizes = []int{500, 2000, 8000, 32000}
		if o.Quick {
			o.SweepBatchSizes = []int{500, 4000}
		}
	} else {
		o.SweepBatchSizes = slices.Clone(o.SweepBatchSizes)
	}
	slices.Sort(o.SweepBatchSizes)
	o.SweepBatchSizes = slices.Compact(o.SweepBatchSizes)
	o.BufferSize, o.PollingBufferSize, o.Seed = cmp.Or(o.BufferSize, chain.DefaultBufferSize), cmp.Or(o.PollingBufferSize, 32), cmp.Or(o.Seed, 1)
	o.CostMedian, o.BatchLinger, o.Timeout = cmp.Or(o.CostMedian, defaultCost), cmp.Or(o.BatchLinger, 100*time.Millisecond), cmp.Or(o.Timeout, 10*time.Minute)
	if o.EOSCost {
		// A fetch slower than 100 ms on a loaded machine with a real broker
		// released a gate early once (a content difference fails the run);
		// longer runs keep the longer tail small.
		o.IdleTimeout = cmp.Or(o.IdleTimeout, costIdleTimeout)
		if !o.Quick {
			o.Duration = cmp.Or(o.Duration, costDuration)
		}
	}
	o.IdleTimeout = cmp.Or(o.IdleTimeout, 100*time.Millisecond)
	if o.Quick {
		o.LatencyDuration, o.CommitInterval = cmp.Or(o.LatencyDuration, time.Second), cmp.Or(o.CommitInterval, 50*time.Millisecond)
	}
	o.LatencyDuration, o.CommitInterval = cmp.Or(o.LatencyDuration, 6*time.Second), cmp.Or(o.CommitInterval, 200*time.Millisecond)
	o.Duration = cmp.Or(o.Duration, o.CommitInterval*25/2)
	o.LatencyLoad, o.Store, o.Gate = cmp.Or(o.LatencyLoad, 0.5), cmp.Or(o.Store, "pebble"), cmp.Or(o.Gate, chain.GateKey)
	o.Progress = cmp.Or[io.Writer](o.Progress, io.Discard)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	return o
}

// Validate reports every option Run would reject, once the defaults are
// applied, each error naming the field by its flag of `differential bench`
// (docs/cli.md); it also creates JSONPath's folder and checks that a file
// can be written there, so that a run does not fail at its end for want of
// a folder (a fresh clone has no bench/results: it is git-ignored). Run
// calls it first; so does the CLI, to report a usage error.
func (o Options) Validate() error { return o.withDefaults().validate() }

func (o Options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	for _, w := range o.Workloads {
		check(slices.Contains(Workloads, w), "--workloads: unknown workload %q (want %s)", w, strings.Join(Workloads, ", "))
	}
	check(o.Records >= 0, "--records must be >= 0, got %d", o.Records)
	check(o.CommitInterval > 0, "--commit-interval must be > 0, got %v", o.CommitInterval)
	check(o.Duration >= 10*o.CommitInterval, "--duration (%v) must be at least 10 × --commit-interval (%v): every run holds ten checkpoints", o.Duration, o.CommitInterval)
	check(!slices.ContainsFunc(o.SweepBatchSizes, func(n int) bool { return n <= 0 }), "--sweep: batch sizes must be > 0, got %v", o.SweepBatchSizes)
	check(o.Partitions > 0, "--partitions must be > 0, got %d", o.Partitions)
	check(o.Workers > 0 && o.Workers <= chain.DefaultInFlight, "--workers must be in [1, %d] (the chain's in-flight window), got %d", chain.DefaultInFlight, o.Workers)
	check(o.KeyConcurrency >= 0 && o.KeyConcurrency <= o.Workers, "--key-concurrency must be in [1, --workers=%d] (0: --workers), got %d", o.Workers, o.KeyConcurrency)
	check(o.Repeats > 0, "--repeats must be > 0, got %d", o.Repeats)
	check(o.BatchSize > 0, "--batch-size must be > 0, got %d", o.BatchSize)
	check(o.BatchLinger > 0, "--batch-linger must be > 0, got %v", o.BatchLinger)
	check(o.BufferSize >= 2, "--buffer must be >= 2, got %d", o.BufferSize)
	check(o.PollingBufferSize >= 2, "--polling-buffer must be >= 2, got %d", o.PollingBufferSize)
	check(o.IdleTimeout > 0, "--idle-timeout must be > 0, got %v", o.IdleTimeout)
	check(o.CostMedian >= 0, "--cost-median must be >= 0, got %v", o.CostMedian)
	check(o.LatencyLoad > 0 && o.LatencyLoad <= 1, "--latency-load must be in (0, 1], got %v", o.LatencyLoad)
	check(o.LatencyDuration > 0, "--latency-duration must be > 0, got %v", o.LatencyDuration)
	check(o.Timeout > 0, "--timeout must be > 0, got %v", o.Timeout)
	check(o.Store == "pebble" || o.Store == "memory", "--store must be pebble or memory, got %q", o.Store)
	if _, err := chain.ParseGateScope(string(o.Gate)); err != nil {
		errs = append(errs, fmt.Errorf("--gate: %w", err))
	}
	check(o.Velocity >= 0, "--velocity-window must be >= 0, got %v", o.Velocity)
	if o.Velocity > 0 {
		if err := velocityConfig(attributionConfig(), o.Velocity).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--velocity-window %v: %w", o.Velocity, err))
		}
	}
	errs = append(errs, o.validateCost()...)
	errs = append(errs, o.validateFloor()...)
	if err := checkWritable(o.JSONPath); err != nil {
		errs = append(errs, fmt.Errorf("--json: %w", err))
	}
	return errors.Join(errs...)
}

// checkWritable creates path's folder and checks that a file can be
// created in it (empty: nil).
func checkWritable(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the folder of %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, ".bench-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// point is one measured configuration: a workload at one partition count and
// worker count.
type point struct {
	name    string // "A", "B", "C"
	wc      workload.Config
	workers int
	// gates: also measure the chain under the other gate scope (a chain
	// variant, chainVariants).
	gates bool
	// ceiling: also measure the raw consumer, the one-stage no-op chain and
	// the polling fallback on this point's stream.
	ceiling bool
	// latency: run the latency phase (A and B; C measures throughput).
	latency bool
	// floor: measure the CPU floor (B: no simulated costs, CPU-bound) and,
	// with Options.Cores, the cores sweep.
	floor bool
}

// attributionConfig is the attribution configuration of every run: the
// defaults of DESIGN.md "Attribution rules" with a record size limit the broker accepts (the
// workload's "oversized" records exceed it by one byte).
func attributionConfig() attribution.Config {
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = maxRecordBytes
	return cfg
}

const maxRecordBytes = 16 << 10

// baseWorkload is A's shape: Zipf users over 10,000 keys, half of the
// journeys on users of 2 hot partitions, log-normal costs. Records, Start
// and Span are set by newStream.
func baseWorkload(seed uint64, partitions int, cost time.Duration) workload.Config {
	wc := workload.DefaultConfig()
	wc.Seed = seed
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
	var pts []point
	for _, w := range o.Workloads {
		switch w {
		case "A":
			pts = append(pts, point{name: "A", wc: baseWorkload(o.Seed, o.Partitions, o.CostMedian), workers: o.Workers, gates: !o.OneGate, latency: true})
		case "B":
			pts = append(pts, point{name: "B", wc: baseWorkload(o.Seed, o.Partitions, 0), workers: o.Workers, ceiling: true, latency: true, floor: true})
		case "C":
			sizes := []int{4, 16, 64}
			for _, p := range sizes {
				for _, wk := range sizes {
					if (o.Quick && (p != 16 || wk != 16)) || (!o.FullGrid && p != wk) {
						continue
					}
					pts = append(pts, point{name: "C", wc: baseWorkload(o.Seed, p, o.CostMedian), workers: wk, gates: !o.OneGate})
				}
			}
		}
	}
	return pts
}

// defaultCost is the default median of A's and C's cost draws.
const defaultCost = time.Millisecond

// validateCost checks --eos-cost's options.
func (o Options) validateCost() []error {
	var errs []error
	if !o.EOSCost {
		if len(o.Guarantees) > 0 {
			errs = append(errs, errors.New("--guarantees is for --eos-cost (the exactly-once cost table)"))
		}
		if len(o.CommitIntervals) > 0 {
			errs = append(errs, errors.New("--commit-intervals is for --eos-cost (the exactly-once cost table); the design comparison takes one --commit-interval"))
		}
		return errs
	}
	if slices.Contains(o.Workloads, "C") {
		errs = append(errs, errors.New("--workloads: the exactly-once cost table runs A and B, not C"))
	}
	for i, g := range o.Guarantees {
		if !slices.Contains(Guarantees, g) {
			errs = append(errs, fmt.Errorf("--guarantees: unknown guarantee %q (want %s)", g, strings.Join(Guarantees, " or ")))
		} else if slices.Contains(o.Guarantees[:i], g) {
			errs = append(errs, fmt.Errorf("--guarantees: %q given twice", g))
		}
	}
	for i, iv := range o.CommitIntervals {
		if iv <= 0 {
			errs = append(errs, fmt.Errorf("--commit-intervals: every interval must be > 0, got %v", iv))
		} else if slices.Contains(o.CommitIntervals[:i], iv) {
			errs = append(errs, fmt.Errorf("--commit-intervals: %v given twice", iv))
		}
	}
	return errs
}

// The cost table's defaults of IdleTimeout and Duration (Options.EOSCost).
const (
	costIdleTimeout = 500 * time.Millisecond
	costDuration    = 5 * time.Second
)

// chainKeyConcurrency is the chain's key concurrency at point pt: W, or
// KeyConcurrency on A and B (C sweeps W itself).
func (o Options) chainKeyConcurrency(pt point) int {
	if o.KeyConcurrency > 0 && pt.name != "C" {
		return o.KeyConcurrency
	}
	return pt.workers
}

// validateFloor checks --floor-only and --cores.
func (o Options) validateFloor() []error {
	var errs []error
	if (o.FloorOnly || len(o.Cores) > 0) && o.EOSCost {
		errs = append(errs, errors.New("--floor-only and --cores are for the design comparison, not --eos-cost"))
	}
	if i := slices.IndexFunc(o.Workloads, func(w string) bool { return w != "B" }); o.FloorOnly && i >= 0 {
		errs = append(errs, fmt.Errorf("--floor-only measures workload B only, not %q", o.Workloads[i]))
	}
	if len(o.Cores) > 0 && !slices.Contains(o.Workloads, "B") {
		errs = append(errs, errors.New("--cores sweeps workload B: add it to --workloads"))
	}
	for i, n := range o.Cores {
		if n < 1 || n > runtime.NumCPU() {
			errs = append(errs, fmt.Errorf("--cores: each count must be in [1, %d] (this machine's CPUs), got %d", runtime.NumCPU(), n))
		} else if slices.Contains(o.Cores[:i], n) {
			errs = append(errs, fmt.Errorf("--cores: %d given twice", n))
		}
	}
	return errs
}
