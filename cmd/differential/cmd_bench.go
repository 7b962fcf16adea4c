package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/differential-dev/differential/bench"
	"github.com/differential-dev/differential/chain"
)

const benchSynopsis = `Measures the chain engine against the micro-batch baseline (DESIGN §6) on the
same broker, input, processors, store and worker cap, and checks every run's
outputs against the reference model (exit 1 if any design is incorrect).
Without --brokers it starts an embedded broker. The flags map one to one onto
bench.Options; 0 or empty means bench's default, given in each flag's help.
Progress goes to stderr, the report table to stdout.`

// benchCmd is `differential bench`.
func benchCmd(ctx context.Context, args []string, e *env) error {
	var o bench.Options
	var workloads []string
	logFormat, logLevel := "text", "error"
	fs := newFlagSet("bench", benchSynopsis, e)
	fs.Var(listValue{&o.Brokers}, "brokers", "Kafka bootstrap brokers, `host:port[,...]`; empty: an embedded broker")
	fs.Var(listValue{&workloads}, "workloads", "workloads to run, any of `A,B,C` (default all)")
	fs.IntVar(&o.Records, "records", 0, "records per workload (default per workload: A 20,000, B 50,000, C 3,000 per point)")
	fs.IntVar(&o.Partitions, "partitions", 0, "input partitions of A and B (default 8)")
	fs.IntVar(&o.Workers, "workers", 0, "cap W on records in processing at once, both designs (default 64)")
	fs.Uint64Var(&o.Seed, "seed", 0, "workload seed (default 1)")
	fs.Var(durationValue{&o.CostMedian}, "cost-median", "median simulated per-record cost of A and C, a `duration` (default 1ms)")
	fs.BoolVar(&o.Quick, "quick", false, "small sizes (a smoke test, under a minute)")
	fs.IntVar(&o.Repeats, "repeats", 0, "runs per design, alternating; the median is reported (default 1)")
	fs.StringVar(&o.JSONPath, "json", "", "write the JSON report to this `file`")
	fs.StringVar(&o.SVGPath, "svg", "", "write the SVG charts to this `file`")
	fs.IntVar(&o.BatchSize, "batch-size", 0, "micro-batch poll size in records (default 500)")
	fs.Var(durationValue{&o.BatchLinger}, "batch-linger", "the `duration` a micro-batch poll waits for a full batch (default 100ms)")
	fs.IntVar(&o.BufferSize, "buffer", 0, fmt.Sprintf("the chain's handoff buffer per partition (default %d)", chain.DefaultBufferSize))
	gate := string(chain.GateKey)
	fs.Var(enumValue{&gate, gateValues}, "gate", gateUsage)
	fs.BoolVar(&o.OneGate, "one-gate", false, "measure the chain with --gate only (A and C also measure the other gate scope by default)")
	fs.IntVar(&o.PollingBufferSize, "polling-buffer", 0, "the tiny buffer of the polling-fallback measurement (default 32)")
	fs.Var(durationValue{&o.IdleTimeout}, "idle-timeout", "idle release `duration` of both designs (default 100ms)")
	fs.Float64Var(&o.LatencyLoad, "latency-load", 0, "latency-phase load, a fraction of the slower design's throughput (default 0.5)")
	fs.Var(durationValue{&o.LatencyDuration}, "latency-duration", "the `duration` the latency phase feeds input (default 6s; --quick 1s)")
	fs.BoolVar(&o.NoLatency, "no-latency", false, "skip the latency phase")
	fs.BoolVar(&o.MicroBatchKeyOrder, "microbatch-key-order", false, "also run the micro-batch with per-key order (A and C)")
	fs.StringVar(&o.Store, "store", "", "state store: pebble or memory (default pebble)")
	fs.StringVar(&o.Dir, "dir", "", "`directory` for the Pebble stores (default the system's temporary directory)")
	fs.Var(durationValue{&o.Timeout}, "timeout", "bound on one design run, a `duration` (default 10m)")
	fs.Var(durationValue{&o.Velocity}, "velocity-window", "also run B's chain with the velocity stage over this `duration` (threshold 20) and report its cost per record (default 0: not)")
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
	if len(o.Brokers) > 0 {
		if err := checkBrokers("brokers", o.Brokers); err != nil {
			return err
		}
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
	case o.CostMedian < 0 || o.BatchLinger < 0 || o.IdleTimeout < 0 || o.LatencyDuration < 0 || o.Timeout < 0 || o.Velocity < 0:
		return usagef("durations must be >= 0")
	case o.Store != "" && o.Store != "pebble" && o.Store != "memory":
		return usagef("--store must be pebble or memory, got %q", o.Store)
	}
	return nil
}
