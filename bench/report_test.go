package bench

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

// Until the CLI's `differential bench` exists, this runs the benchmark from
// `go test` with flags named like the CLI's, e.g.
//
//	go test ./bench -run TestReport -count=1 -timeout 60m -args -bench.run -bench.json=bench.json -bench.svg=bench.svg
var (
	runFlag       = flag.Bool("bench.run", false, "run the benchmark (bench.Run) and print the report")
	brokersFlag   = flag.String("bench.brokers", "", "comma-separated brokers (empty: embedded)")
	workloadsFlag = flag.String("bench.workloads", "", "comma-separated workloads (A,B,C; empty: all)")
	recordsFlag   = flag.Int("bench.records", 0, "records per workload (0: defaults)")
	partsFlag     = flag.Int("bench.partitions", 0, "partitions of A and B (0: 8)")
	workersFlag   = flag.Int("bench.workers", 0, "W for A and B (0: 64)")
	seedFlag      = flag.Uint64("bench.seed", 0, "workload seed (0: 1)")
	quickFlag     = flag.Bool("bench.quick", false, "quick mode")
	repeatsFlag   = flag.Int("bench.repeats", 0, "repeats (0: 1)")
	costFlag      = flag.Duration("bench.cost-median", 0, "median cost of A and C (0: 1ms)")
	keyOrderFlag  = flag.Bool("bench.microbatch-key-order", false, "also run the per-key micro-batch variant")
	noLatencyFlag = flag.Bool("bench.no-latency", false, "skip the latency phase")
	storeFlag     = flag.String("bench.store", "", "state store: pebble (default) or memory")
	jsonFlag      = flag.String("bench.json", "", "JSON report path")
	svgFlag       = flag.String("bench.svg", "", "SVG charts path")
)

func TestReport(t *testing.T) {
	if !*runFlag {
		t.Skip("run with -args -bench.run")
	}
	o := Options{
		Workloads: splitList(*workloadsFlag), Brokers: splitList(*brokersFlag),
		Records: *recordsFlag, Partitions: *partsFlag, Workers: *workersFlag, Seed: *seedFlag,
		Quick: *quickFlag, Repeats: *repeatsFlag, CostMedian: *costFlag,
		MicroBatchKeyOrder: *keyOrderFlag, NoLatency: *noLatencyFlag,
		Store: *storeFlag, JSONPath: *jsonFlag, SVGPath: *svgFlag, Progress: os.Stderr,
	}
	start := time.Now()
	rep, err := Run(context.Background(), o)
	_ = rep.WriteTable(os.Stdout)
	t.Logf("took %v", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatal(err)
	}
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
