package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/differential-dev/differential/bench"
	"github.com/differential-dev/differential/chain"
)

const benchSynopsis = `Measures the chain engine against two micro-batch baselines on the same broker,
input, processors, store and worker cap: the strongest micro-batch (per-key
order, no linger, one synced checkpoint batch, background commits, its batch
size chosen by a sweep in the same run; the headline) and the micro-batch baseline (the
design the engine replaces). A and C measure the chain under --gate (the
headline) and under the other gate scope (--one-gate: --gate only). Every
throughput run is sized by time (at least --duration, which holds ten or
more of the chain's checkpoints and commits), and every run's outputs are
checked against the reference model (exit 1 if any design is incorrect).
--eos-cost measures instead the exactly-once cost table: workloads
B and A, each of --guarantees at each of --commit-intervals, throughput and
p99 side by side, every run checked (exactly-once's outputs read
read_committed). Without --brokers it starts an embedded broker. The flags map
one to one onto bench.Options; 0 or empty means bench's default, given in
each flag's help. Progress goes to stderr, the report table to stdout.`

// benchCmd is `differential bench`.
func benchCmd(ctx context.Context, args []string, e *env) error {
	var o bench.Options
	var workloads []string
	logFormat, logLevel := "text", "error"
	fs := newFlagSet("bench", benchSynopsis, e)
	fs.Var(listValue{&o.Brokers}, "brokers", "Kafka bootstrap brokers, `host:port[,...]`; empty: an embedded broker")
	fs.Var(listValue{&workloads}, "workloads", "workloads to run, any of `A,B,C` (default all)")
	fs.Var(durationValue{&o.Duration}, "duration", "least `duration` of every throughput run; inputs are sized by each design's throughput to last it (default 12.5 × --commit-interval: 2.5s; --quick 0.625s; --eos-cost 5s)")
	fs.Var(durationValue{&o.CommitInterval}, "commit-interval", "the chain's checkpoint and commit interval, a `duration` (default 200ms; --quick 50ms)")
	fs.IntVar(&o.Records, "records", 0, "fix every design run's input to this many records instead of sizing it by time")
	fs.IntVar(&o.Partitions, "partitions", 0, "input partitions of A and B (default 8)")
	fs.IntVar(&o.Workers, "workers", 0, "cap W on records in processing at once, both designs (default 64)")
	fs.IntVar(&o.KeyConcurrency, "key-concurrency", 0, "the chain's records of different keys a stage may run at once on A and B, at most W (default W)")
	fs.Uint64Var(&o.Seed, "seed", 0, "workload seed (default 1)")
	fs.Var(durationValue{&o.CostMedian}, "cost-median", "median simulated per-record cost of A and C, a `duration` (default 1ms)")
	fs.BoolVar(&o.Quick, "quick", false, "short runs (a smoke test, about a minute)")
	fs.BoolVar(&o.FullGrid, "full-grid", false, "run workload C over all nine partitions × workers points, not only P = W")
	fs.IntVar(&o.Repeats, "repeats", 0, "runs of the chain and both baselines, alternating; the median is reported (default 1)")
	fs.StringVar(&o.JSONPath, "json", "", "write the JSON report to this `file` (its folder is created)")
	fs.Var(intListValue{&o.SweepBatchSizes}, "sweep", "batch `sizes` the strongest micro-batch is measured at (default 500,2000,8000,32000; --quick 500,4000)")
	fs.IntVar(&o.BatchSize, "batch-size", 0, "micro-batch baseline: its poll size in records (default 500)")
	fs.Var(durationValue{&o.BatchLinger}, "batch-linger", "micro-batch baseline: the `duration` a micro-batch poll waits for a full batch (default 100ms)")
	fs.IntVar(&o.BufferSize, "buffer", 0, fmt.Sprintf("the chain's handoff buffer per partition (default %d)", chain.DefaultBufferSize))
	gate := string(chain.GateKey)
	fs.Var(enumValue{&gate, gateValues}, "gate", gateUsage)
	fs.BoolVar(&o.OneGate, "one-gate", false, "measure the chain with --gate only (A and C also measure the other gate scope by default)")
	fs.IntVar(&o.PollingBufferSize, "polling-buffer", 0, "the tiny buffer of the polling-fallback measurement (default 32)")
	fs.Var(durationValue{&o.IdleTimeout}, "idle-timeout", "idle release `duration` of both designs (default 100ms; --eos-cost 500ms)")
	fs.Float64Var(&o.LatencyLoad, "latency-load", 0, "latency-phase load, a fraction of the slower design's throughput in each comparison (default 0.5)")
	fs.Var(durationValue{&o.LatencyDuration}, "latency-duration", "the `duration` the latency phase feeds input (default 6s; --quick 1s)")
	fs.BoolVar(&o.NoLatency, "no-latency", false, "skip the latency phase")
	fs.StringVar(&o.Store, "store", "", "state store: pebble or memory (default pebble)")
	fs.StringVar(&o.Dir, "dir", "", "`directory` for the Pebble stores (default the system's temporary directory)")
	fs.Var(durationValue{&o.Timeout}, "timeout", "bound on one design run, a `duration` (default 10m)")
	fs.Var(durationValue{&o.Velocity}, "velocity-window", "also run B's chain with the velocity stage over this `duration` (threshold 20) and report its cost per record (default 0: not)")
	fs.BoolVar(&o.EOSCost, "eos-cost", false, "measure the exactly-once cost table instead of the design comparison: workloads B and A (--workloads), each of --guarantees at each of --commit-intervals")
	fs.Var(listValue{&o.Guarantees}, "guarantees", "--eos-cost: delivery `guarantees`, any of at-least-once,exactly-once (default both)")
	fs.Var(durationListValue{&o.CommitIntervals}, "commit-intervals", "--eos-cost: the chain's commit `intervals` (default 50ms,100ms,250ms,500ms,1s; --quick 50ms,100ms,250ms)")
	fs.BoolVar(&o.FloorOnly, "floor-only", false, "workload B only: measure its CPU floor (and --cores), no design comparison; every run of B measures the floor anyway")
	fs.Var(intListValue{&o.Cores}, "cores", "workload B: also run the chain and the strongest micro-batch at each of these GOMAXPROCS `counts`, e.g. 1,2 (each at most the machine's CPUs; default none)")
	registerLogFlags(fs, &logFormat, &logLevel, "engine log `level`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.Workloads = workloads
	o.Gate = chain.GateScope(gate)
	if err := checkBenchOptions(&o); err != nil {
		return err
	}
	o.Progress = e.stderr
	o.Logger = newLogger(e.stderr, logFormat, logLevel)
	rep, err := bench.Run(ctx, o)
	if len(rep.Workloads) > 0 {
		if werr := rep.WriteTable(e.stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if errors.Is(err, bench.ErrIncorrect) {
		return fmt.Errorf("a design's outputs differ from the reference model (see the report): %w", err)
	}
	return err
}

// checkBenchOptions rejects, as usage errors naming the flag, what
// bench.Run would reject (it validates again).
func checkBenchOptions(o *bench.Options) error {
	for _, w := range o.Workloads {
		if !slices.Contains(bench.Workloads, strings.ToUpper(w)) {
			return usagef("--workloads: unknown workload %q (want %s)", w, strings.Join(bench.Workloads, ", "))
		}
	}
	if err := checkCostOptions(o); err != nil {
		return err
	}
	if err := checkFloorOptions(o); err != nil {
		return err
	}
	if len(o.Brokers) > 0 {
		if err := checkBrokers("brokers", o.Brokers); err != nil {
			return err
		}
	}
	if d := o.Defaults(); d.Duration < 10*d.CommitInterval {
		return usagef("--duration (%v) must be at least 10 × --commit-interval (%v): every run holds ten checkpoints", d.Duration, d.CommitInterval)
	}
	switch {
	case o.Records < 0:
		return usagef("--records must be >= 0, got %d", o.Records)
	case o.Partitions < 0:
		return usagef("--partitions must be >= 0, got %d", o.Partitions)
	case o.Workers < 0 || o.Workers > maxKeyConcurrency:
		return usagef("--workers must be in [1, %d], got %d", maxKeyConcurrency, o.Workers)
	case o.Repeats < 0:
		return usagef("--repeats must be >= 0, got %d", o.Repeats)
	case o.BatchSize < 0:
		return usagef("--batch-size must be >= 0, got %d", o.BatchSize)
	case o.BufferSize != 0 && o.BufferSize < 2:
		return usagef("--buffer must be >= 2, got %d", o.BufferSize)
	case o.PollingBufferSize != 0 && o.PollingBufferSize < 2:
		return usagef("--polling-buffer must be >= 2, got %d", o.PollingBufferSize)
	case o.LatencyLoad < 0 || o.LatencyLoad > 1:
		return usagef("--latency-load must be in (0, 1], got %v", o.LatencyLoad)
	case o.CostMedian < 0 || o.BatchLinger < 0 || o.IdleTimeout < 0 || o.LatencyDuration < 0 || o.Timeout < 0 || o.Duration < 0 || o.CommitInterval < 0 || o.Velocity < 0:
		return usagef("durations must be >= 0")
	case slices.ContainsFunc(o.SweepBatchSizes, func(n int) bool { return n <= 0 }):
		return usagef("--sweep: batch sizes must be > 0, got %v", o.SweepBatchSizes)
	case o.Store != "" && o.Store != "pebble" && o.Store != "memory":
		return usagef("--store must be pebble or memory, got %q", o.Store)
	}
	// The report's file: its folder is created (a fresh clone has no
	// bench/results) and checked writable before minutes of measuring.
	if err := bench.CheckWritable(o.JSONPath); err != nil {
		return usagef("--json: %w", err)
	}
	return nil
}

// intListValue is a comma-separated list of integers (batch sizes).
type intListValue struct{ p *[]int }

func (l intListValue) String() string {
	if l.p == nil || len(*l.p) == 0 {
		return ""
	}
	parts := make([]string, len(*l.p))
	for i, n := range *l.p {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (l intListValue) Set(s string) error {
	var out []int
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil {
			return fmt.Errorf("not a list of integers (e.g. 500,2000): %q", s)
		}
		out = append(out, n)
	}
	*l.p = out
	return nil
}

// checkCostOptions rejects, as usage errors naming the flag, bad
// --eos-cost, --guarantees and --commit-intervals values.
func checkCostOptions(o *bench.Options) error {
	if !o.EOSCost {
		switch {
		case len(o.Guarantees) > 0:
			return usagef("--guarantees is for --eos-cost (the exactly-once cost table)")
		case len(o.CommitIntervals) > 0:
			return usagef("--commit-intervals is for --eos-cost (the exactly-once cost table); the design comparison takes one --commit-interval")
		}
		return nil
	}
	for _, w := range o.Workloads {
		if strings.ToUpper(w) == "C" {
			return usagef("--workloads: the exactly-once cost table runs A and B, not C")
		}
	}
	for i, g := range o.Guarantees {
		if !slices.Contains(bench.Guarantees, g) {
			return usagef("--guarantees: unknown guarantee %q (want %s)", g, strings.Join(bench.Guarantees, " or "))
		}
		if slices.Contains(o.Guarantees[:i], g) {
			return usagef("--guarantees: %q given twice", g)
		}
	}
	for i, iv := range o.CommitIntervals {
		if iv <= 0 {
			return usagef("--commit-intervals: every interval must be > 0, got %v", iv)
		}
		if slices.Contains(o.CommitIntervals[:i], iv) {
			return usagef("--commit-intervals: %v given twice", iv)
		}
	}
	return nil
}

// durationListValue is a comma-separated list of durations.
type durationListValue struct{ p *[]time.Duration }

func (l durationListValue) String() string {
	if l.p == nil || len(*l.p) == 0 {
		return ""
	}
	parts := make([]string, len(*l.p))
	for i, d := range *l.p {
		parts[i] = formatDuration(d)
	}
	return strings.Join(parts, ",")
}

func (l durationListValue) Set(s string) error {
	var out []time.Duration
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		d, err := parseDuration(x)
		if err != nil {
			return fmt.Errorf("not a list of durations (e.g. 100ms,1s,5s): %q", s)
		}
		out = append(out, d)
	}
	*l.p = out
	return nil
}

// checkFloorOptions rejects, as usage errors naming the flag, bad
// --floor-only and --cores values.
func checkFloorOptions(o *bench.Options) error {
	hasB := len(o.Workloads) == 0
	for _, w := range o.Workloads {
		if strings.ToUpper(w) == "B" {
			hasB = true
		} else if o.FloorOnly {
			return usagef("--floor-only measures workload B only, not %q", w)
		}
	}
	if (o.FloorOnly || len(o.Cores) > 0) && o.EOSCost {
		return usagef("--floor-only and --cores are for the design comparison, not --eos-cost")
	}
	if len(o.Cores) > 0 && !hasB {
		return usagef("--cores sweeps workload B: add it to --workloads")
	}
	for i, n := range o.Cores {
		if n < 1 || n > runtime.NumCPU() {
			return usagef("--cores: each count must be in [1, %d] (this machine's CPUs), got %d", runtime.NumCPU(), n)
		}
		if slices.Contains(o.Cores[:i], n) {
			return usagef("--cores: %d given twice", n)
		}
	}
	return nil
}
