package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what Run measured.
type Report struct {
	Started           time.Time        `json:"-"`
	Broker            string           `json:"-"`
	GoVersion         string           `json:"-"`
	CPUs              int              `json:"-"`
	GOMAXPROCS        int              `json:"-"`
	Quick             bool             `json:"-"`
	Store             string           `json:"-"`
	BatchSize         int              `json:"-"`
	BatchLinger       string           `json:"-"`
	BufferSize        int              `json:"-"`
	PollingBufferSize int              `json:"-"`
	IdleTimeout       string           `json:"-"`
	LatencyLoad       float64          `json:"-"`
	Repeats           int              `json:"-"`
	Workloads         []WorkloadResult `json:"-"`
	Targets           []Target         `json:"-"`
}

// WorkloadResult is one workload at one partition and worker count: one
// object of the JSON array.
type WorkloadResult struct {
	Workload   string `json:"workload"`
	Records    int    `json:"records"`
	Partitions int    `json:"partitions"`
	Workers    int    `json:"workers"`
	// Params is the generator's configuration (workload.Config.String).
	Params     string  `json:"params"`
	Bound      Bound   `json:"bound"`
	BoundTimeS float64 `json:"bound_time_s"`

	// Gate is the gate scope of Chain (Options.Gate); OtherGate, when set,
	// that of ChainOtherGate, the chain with the other scope.
	Gate           string        `json:"gate"`
	Chain          *DesignResult `json:"chain"`
	OtherGate      string        `json:"other_gate,omitempty"`
	ChainOtherGate *DesignResult `json:"chain_other_gate,omitempty"`
	MicroBatch     *DesignResult `json:"microbatch"`
	MicroBatchKey  *DesignResult `json:"microbatch_key,omitempty"`
	Raw            *DesignResult `json:"raw,omitempty"`
	NoopChain      *DesignResult `json:"noop_chain,omitempty"`
	PollingChain   *DesignResult `json:"polling_chain,omitempty"`

	// RatioThroughput is chain ÷ micro-batch throughput; RatioP99 is chain ÷
	// micro-batch p99 latency (0.1 = ten times lower).
	RatioThroughput float64  `json:"ratio_throughput"`
	RatioP99        *float64 `json:"ratio_p99"`
	// RatioNoopRaw is the one-stage no-op chain ÷ raw consumer throughput,
	// measured on a separate input of CeilingRecords records.
	RatioNoopRaw   *float64 `json:"ratio_noop_raw,omitempty"`
	CeilingRecords int      `json:"ceiling_records,omitempty"`
	// RatioPolling is the chain with a tiny buffer (followers poll Kafka) ÷
	// the chain with its default buffer.
	RatioPolling *float64 `json:"ratio_polling,omitempty"`
	// Velocity is the chain with the velocity stage (Options.Velocity).
	Velocity *VelocityResult `json:"velocity,omitempty"`

	// The latency phase: offered load and records fed.
	LatencyRate    float64 `json:"latency_offered_rps,omitempty"`
	LatencyRecords int     `json:"latency_records,omitempty"`
}

// DesignResult is one design's measurement.
type DesignResult struct {
	ThroughputRPS float64 `json:"throughput_rps"`
	// P50ms and P99ms come from the latency phase (null when not measured).
	P50ms *float64 `json:"p50_ms"`
	P99ms *float64 `json:"p99_ms"`
	// FloorP50ms and FloorP99ms are the same quantiles of the least latency
	// the event-time gate allows at the offered load (see latencyFloors):
	// the wait for a later event time on the partition plus the own cost.
	FloorP50ms *float64 `json:"floor_p50_ms,omitempty"`
	FloorP99ms *float64 `json:"floor_p99_ms,omitempty"`
	CPUs       float64  `json:"cpu_s"`
	// PeakHeapMB is the largest live heap of the process during the run (as
	// marked by the last GC, runtime/metrics /gc/heap/live:bytes; the
	// embedded broker's topics included). PeakHeapAllocMB also counts
	// garbage not yet collected (/memory/classes/heap/objects:bytes).
	PeakHeapMB      float64 `json:"peak_heap_mb"`
	PeakHeapAllocMB float64 `json:"peak_heap_alloc_mb"`
	// Efficiency is throughput ÷ the bound's throughput (null without costs).
	Efficiency *float64 `json:"efficiency"`
	// EfficiencyChainOrder is throughput ÷ the chain-order bound's
	// (Bound.ChainOrderTime): how close a run gets to what the chain's
	// ordering rules allow.
	EfficiencyChainOrder *float64 `json:"efficiency_chain_order,omitempty"`
	// WaitOvershoot is how much longer the simulated costs' timers waited
	// than asked, overall (0.1 = 10% longer).
	WaitOvershoot float64 `json:"wait_overshoot,omitempty"`
	Elapsed       float64 `json:"elapsed_s"`
	// LatencyOutputs counts the outputs whose latency was measured.
	LatencyOutputs     int          `json:"latency_outputs,omitempty"`
	Correctness        *Correctness `json:"correctness,omitempty"`
	LatencyCorrectness *Correctness `json:"latency_correctness,omitempty"`
	Note               string       `json:"note,omitempty"`

	series    []seriesPoint
	latencies []time.Duration
}

type seriesPoint struct {
	t    float64 // seconds since the first record was consumed
	done int64
}

func (w *WorkloadResult) design(k kind) *DesignResult {
	switch k {
	case kindChain:
		return w.Chain
	case kindChainOtherGate:
		return w.ChainOtherGate
	case kindMicroBatch:
		return w.MicroBatch
	case kindMicroBatchKey:
		return w.MicroBatchKey
	}
	return nil
}

func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := a / b
	return &r
}

func (w *WorkloadResult) ratios() {
	if w.Chain == nil || w.MicroBatch == nil {
		return
	}
	if r := ratio(w.Chain.ThroughputRPS, w.MicroBatch.ThroughputRPS); r != nil {
		w.RatioThroughput = *r
	}
	if w.Chain.P99ms != nil && w.MicroBatch.P99ms != nil {
		w.RatioP99 = ratio(*w.Chain.P99ms, *w.MicroBatch.P99ms)
	}
	if w.NoopChain != nil && w.Raw != nil {
		w.RatioNoopRaw = ratio(w.NoopChain.ThroughputRPS, w.Raw.ThroughputRPS)
	}
	if w.PollingChain != nil {
		w.RatioPolling = ratio(w.PollingChain.ThroughputRPS, w.Chain.ThroughputRPS)
	}
}

// Target is one of the project's claims, checked against the measurement.
type Target struct {
	Name string  `json:"name"`
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
	// AtMost: the target is Got ≤ Want (otherwise Got ≥ Want).
	AtMost bool `json:"at_most,omitempty"`
}

func targets(ws []WorkloadResult) []Target {
	var ts []Target
	add := func(name string, want float64, got *float64) {
		if got != nil {
			ts = append(ts, Target{Name: name, Want: want, Got: *got, Met: *got >= want})
		}
	}
	atMost := func(name string, want float64, got *float64) {
		if got != nil {
			ts = append(ts, Target{Name: name, Want: want, Got: *got, Met: *got <= want, AtMost: true})
		}
	}
	for i := range ws {
		w := &ws[i]
		if w.Chain == nil || w.MicroBatch == nil {
			continue
		}
		switch w.Workload {
		case "A":
			// Issue #13's targets, for the headline chain (its gate scope
			// is in the table).
			add("A: chain ÷ micro-batch throughput ≥", 15, &w.RatioThroughput)
			if w.RatioP99 != nil {
				inv := 1 / *w.RatioP99
				add("A: micro-batch ÷ chain p99 latency ≥", 5, &inv)
			}
			if c := w.Chain; c.P99ms != nil && c.FloorP99ms != nil {
				atMost("A: chain p99 ÷ event-time floor p99 ≤", 1.1, ratio(*c.P99ms, *c.FloorP99ms))
			}
			add("A: chain efficiency ≥", 0.9, w.Chain.Efficiency)
		case "B":
			add("B: chain ÷ micro-batch throughput ≥", 1, &w.RatioThroughput)
			add("B: one-stage no-op chain ÷ raw consumer ≥", 0.9, w.RatioNoopRaw)
			add("B: polling fallback ÷ buffered chain ≥", 0.7, w.RatioPolling)
		}
	}
	return ts
}

// WriteTable prints the report as text tables.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "differential bench — %s, %s, %d CPUs (GOMAXPROCS %d), store %s\n", r.Broker, r.GoVersion, r.CPUs, r.GOMAXPROCS, r.Store)
	fmt.Fprintf(&b, "micro-batch %d records / %s linger; chain buffer %d; idle release %s; latency phase at %.0f%% of the slower design; repeats %d\n",
		r.BatchSize, r.BatchLinger, r.BufferSize, r.IdleTimeout, 100*r.LatencyLoad, r.Repeats)
	for i := range r.Workloads {
		wr := &r.Workloads[i]
		fmt.Fprintf(&b, "\nworkload %s: %d records, %d partitions, W=%d\n", wr.Workload, wr.Records, wr.Partitions, wr.Workers)
		fmt.Fprintf(&b, "  %s\n", wr.Params)
		if wr.Bound.TotalCost > 0 {
			fmt.Fprintf(&b, "  bound %.2fs = max(total cost %.1fs ÷ W=%d, longest key×stage chain %.2fs) over %d processed records\n",
				wr.Bound.Time.Seconds(), wr.Bound.TotalCost.Seconds(), wr.Workers, wr.Bound.LongestChain.Seconds(), wr.Bound.Processed)
			fmt.Fprintf(&b, "  order bounds (critical path under the chain's gate and per-key order, unlimited workers; eff (order) is against its own scope's): partition gate %.2fs (path %.2fs), key gate %.2fs (path %.2fs)\n",
				wr.Bound.ChainOrderTime.Seconds(), wr.Bound.ChainOrderPath.Seconds(), wr.Bound.KeyOrderTime.Seconds(), wr.Bound.KeyOrderPath.Seconds())
		}
		if wr.LatencyRecords > 0 {
			fmt.Fprintf(&b, "  latency phase: %d records offered at %.0f rec/s", wr.LatencyRecords, wr.LatencyRate)
			if c := wr.Chain; c != nil && c.FloorP99ms != nil {
				fmt.Fprintf(&b, "; event-time gate floor p50 %.1fms p99 %.1fms", *c.FloorP50ms, *c.FloorP99ms)
			}
			b.WriteString("\n")
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  design\trec/s\ttime s\tp50 ms\tp99 ms\tcpu s\theap MB\tefficiency\teff (order)\twait +%\tcorrect\t")
		rows := []struct {
			name string
			d    *DesignResult
		}{
			{chainRowName(wr.Gate), wr.Chain}, {chainRowName(wr.OtherGate), wr.ChainOtherGate},
			{"microbatch", wr.MicroBatch}, {"microbatch/key", wr.MicroBatchKey},
			{"raw consumer", wr.Raw}, {"noop chain", wr.NoopChain}, {"polling chain", wr.PollingChain},
		}
		for _, row := range rows {
			d := row.d
			if d == nil {
				continue
			}
			over := "-"
			if d.WaitOvershoot != 0 {
				over = fmt.Sprintf("%.0f", 100*d.WaitOvershoot)
			}
			fmt.Fprintf(tw, "  %s\t%.0f\t%.2f\t%s\t%s\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t\n", row.name, d.ThroughputRPS, d.Elapsed,
				optf(d.P50ms, "%.1f"), optf(d.P99ms, "%.1f"), d.CPUs, d.PeakHeapMB, optf(d.Efficiency, "%.2f"),
				optf(d.EfficiencyChainOrder, "%.2f"), over, correctText(d))
		}
		tw.Flush()
		fmt.Fprintf(&b, "  chain ÷ micro-batch: throughput %.2fx", wr.RatioThroughput)
		if wr.RatioP99 != nil {
			fmt.Fprintf(&b, ", p99 %.3f (%.1fx lower)", *wr.RatioP99, 1 / *wr.RatioP99)
		}
		b.WriteString("\n")
		if o := wr.ChainOtherGate; o != nil && wr.Chain != nil && wr.MicroBatch != nil && o.ThroughputRPS > 0 {
			fmt.Fprintf(&b, "  %s ÷ micro-batch: throughput %.2fx; %s ÷ %s: throughput %.2fx\n",
				chainRowName(wr.OtherGate), o.ThroughputRPS/wr.MicroBatch.ThroughputRPS,
				chainRowName(wr.Gate), chainRowName(wr.OtherGate), wr.Chain.ThroughputRPS/o.ThroughputRPS)
		}
		if wr.RatioNoopRaw != nil {
			fmt.Fprintf(&b, "  no-op chain ÷ raw consumer: %.2f (on %d records of the same shape, median of 3 each)\n", *wr.RatioNoopRaw, wr.CeilingRecords)
		}
		if wr.RatioPolling != nil {
			fmt.Fprintf(&b, "  polling fallback (buffer %d) ÷ buffered chain: %.2f  [%s]\n", r.PollingBufferSize, *wr.RatioPolling, wr.PollingChain.Note)
		}
		wr.Velocity.write(&b)
		for _, row := range rows[:4] {
			if row.d != nil && row.d.Note != "" {
				fmt.Fprintf(&b, "  %s: %s\n", row.name, row.d.Note)
			}
		}
	}
	r.writeLatencyFloors(&b)
	if len(r.Targets) > 0 {
		b.WriteString("\ntargets\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, t := range r.Targets {
			met := "MET"
			switch {
			case !t.Met && t.AtMost:
				met = fmt.Sprintf("MISSED (%.0f%% over)", 100*(t.Got/t.Want-1))
			case !t.Met:
				met = fmt.Sprintf("MISSED (%.0f%% of target)", 100*t.Got/t.Want)
			}
			fmt.Fprintf(tw, "  %s %g\t%.2f\t%s\n", t.Name, t.Want, t.Got, met)
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func optf(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func correctText(d *DesignResult) string {
	c := d.Correctness
	if c == nil {
		return "-"
	}
	if !c.OK {
		return "FAIL"
	}
	s := fmt.Sprintf("ok %d+%d", c.Outputs, c.DeadLetters)
	if l := d.LatencyCorrectness; l != nil && !l.OK {
		s += " (latency run FAIL)"
	}
	return s
}

// WriteJSON writes the JSON array of workload results.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	ws := r.Workloads
	if ws == nil {
		ws = []WorkloadResult{}
	}
	return enc.Encode(ws)
}

func (r *Report) write(jsonPath, svgPath string) error {
	if jsonPath != "" {
		if err := writeFile(jsonPath, r.WriteJSON); err != nil {
			return err
		}
	}
	if svgPath != "" {
		if err := writeFile(svgPath, r.WriteSVG); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := fn(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}
