package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	logFormat, logLevel := "text", "error"
	fs := newFlagSet("bench", benchSynopsis, e)
	fs.Var(listValue{&o.Brokers}, "brokers", "Kafka bootstrap brokers, `host:port[,...]`; empty: an embedded broker")
	fs.Var(listValue{&o.Workloads}, "workloads", "workloads to run, any of `A,B,C` (default all)")
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
	fs.Var(intList(&o.SweepBatchSizes), "sweep", "batch `sizes` the strongest micro-batch is measured at (default 500,2000,8000,32000; --quick 500,4000)")
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
	fs.Var(durationList(&o.CommitIntervals), "commit-intervals", "--eos-cost: the chain's commit `intervals` (default 50ms,100ms,250ms,500ms,1s; --quick 50ms,100ms,250ms)")
	fs.BoolVar(&o.FloorOnly, "floor-only", false, "workload B only: measure its CPU floor (and --cores), no design comparison; every run of B measures the floor anyway")
	fs.Var(intList(&o.Cores), "cores", "workload B: also run the chain and the strongest micro-batch at each of these GOMAXPROCS `counts`, e.g. 1,2 (each at most the machine's CPUs; default none)")
	registerLogFlags(fs, &logFormat, &logLevel, "engine log `level`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.Gate = chain.GateScope(gate)
	if len(o.Brokers) > 0 {
		if err := checkBrokers("brokers", o.Brokers); err != nil {
			return err
		}
	}
	if err := o.Validate(); err != nil {
		return &usageError{err}
	}
	o.Progress = e.stderr
	o.Logger = newLogger(e.stderr, logFormat, logLevel)
	rep, err := bench.Run(ctx, o)
	return benchDone(e, len(rep.Workloads) > 0, rep.WriteTable, err, "a design's outputs differ from the reference model (see the report)")
}

// benchDone ends a bench command: the report's table goes to stdout when
// anything was measured, even if the run then failed (what it measured
// so far), and a run whose outputs differ from the model fails with
// incorrect (exit 1).
func benchDone(e *env, measured bool, writeTable func(io.Writer) error, err error, incorrect string) error {
	if measured {
		if werr := writeTable(e.stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if errors.Is(err, bench.ErrIncorrect) {
		return fmt.Errorf("%s: %w", incorrect, err)
	}
	return err
}

// parsedList is a comma-separated list flag of values that parse reads
// and format prints (batch sizes, core counts, commit intervals); want
// names the values in the error for a bad one.
type parsedList[T any] struct {
	p      *[]T
	parse  func(string) (T, error)
	format func(T) string
	want   string
}

func intList(p *[]int) parsedList[int] {
	return parsedList[int]{p, strconv.Atoi, strconv.Itoa, "integers (e.g. 500,2000)"}
}

func durationList(p *[]time.Duration) parsedList[time.Duration] {
	return parsedList[time.Duration]{p, parseDuration, formatDuration, "durations (e.g. 100ms,1s,5s)"}
}

func (l parsedList[T]) String() string {
	if l.p == nil {
		return ""
	}
	parts := make([]string, len(*l.p))
	for i, v := range *l.p {
		parts[i] = l.format(v)
	}
	return strings.Join(parts, ",")
}

func (l parsedList[T]) Set(s string) error {
	var out []T
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		v, err := l.parse(x)
		if err != nil {
			return fmt.Errorf("not a list of %s: %q", l.want, s)
		}
		out = append(out, v)
	}
	*l.p = out
	return nil
}
