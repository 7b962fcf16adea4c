package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// designLabel names a run in tables and charts.
func designLabel(d *DesignResult) string {
	switch kind(d.Design) {
	case kindChain:
		if d.Variant != "" {
			return "chain (" + d.Variant + ")"
		}
		return "chain"
	case kindStrongest:
		return fmt.Sprintf("strongest micro-batch (batch %d)", d.BatchSize)
	case kindDesign6:
		return fmt.Sprintf("micro-batch baseline (batch %d)", d.BatchSize)
	case kindRaw:
		return "raw consumer"
	case kindNoop:
		return "one-stage no-op chain"
	case kindPolling:
		return "chain, polling fallback"
	}
	return d.Design
}

// WriteTable prints the report as text tables.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "differential bench — %s, %s, %d CPUs (GOMAXPROCS %d), store %s, costs wait on Go timers (every design; column wait +%%: how much longer than asked)\n", r.Broker, r.GoVersion, r.CPUs, r.GOMAXPROCS, r.Store)
	if r.EOSCost {
		r.writeCost(&b)
		r.writeTargets(&b)
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.Records > 0 {
		fmt.Fprintf(&b, "every throughput run consumes %d records of its point's stream (fixed: runs shorter than %.2fs are not steady state)", r.Records, r.Duration.Seconds())
	} else {
		fmt.Fprintf(&b, "every throughput run lasts ≥ %.2fs: a prefix of its point's stream sized by the design's own throughput", r.Duration.Seconds())
	}
	fmt.Fprintf(&b, "; chain checkpoint+commit interval %s\n", r.CommitInterval)
	fmt.Fprintf(&b, "strongest micro-batch: key order, no linger, one synced checkpoint batch, background commits, batch size swept over %v\n", r.SweepBatchSizes)
	fmt.Fprintf(&b, "micro-batch baseline: partition order, batch %d, linger %s, a checkpoint per partition, synchronous commits\n", r.BatchSize, r.BatchLinger)
	fmt.Fprintf(&b, "chain buffer %d; idle release %s; latency phases at %.0f%% of the slower design of each comparison; repeats %d\n",
		r.BufferSize, r.IdleTimeout, 100*r.LatencyLoad, r.Repeats)
	for i := range r.Workloads {
		r.writeWorkload(&b, &r.Workloads[i])
	}
	r.writeTargets(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTargets prints the targets checked.
func (r *Report) writeTargets(b *strings.Builder) {
	if len(r.Targets) > 0 {
		b.WriteString("\ntargets (one run)\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		for _, t := range r.Targets {
			met := "MET"
			switch {
			case !t.Met && t.Why != "":
				met = "MISSED: " + t.Why
			case !t.Met && t.AtMost:
				met = fmt.Sprintf("MISSED (%.0f%% over)", 100*(t.Got/t.Want-1))
			case !t.Met:
				met = fmt.Sprintf("MISSED (%.0f%% of target)", 100*t.Got/t.Want)
			}
			if t.Note != "" {
				met += " (" + t.Note + ")"
			}
			fmt.Fprintf(tw, "  %s %g\t%.2f\t%s\n", t.Name, t.Want, t.Got, met)
		}
		tw.Flush()
	}
}

func (r *Report) writeWorkload(b *strings.Builder, wr *WorkloadResult) {
	fmt.Fprintf(b, "\nworkload %s: %d partitions, W=%d\n", wr.Workload, wr.Partitions, wr.Workers)
	fmt.Fprintf(b, "  stream: %s\n", wr.Params)
	if l := wr.Limit; l != nil {
		fmt.Fprintf(b, "  bounds on the chain's input (%d records): records/s no run can exceed\n", l.Records)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "    any correct design (pipelined: max(total cost ÷ W, longest key×stage chain))\t%.0f\t\n", l.PipelinedRPS)
		fmt.Fprintf(tw, "    the chain's ordering rules, partition-scoped gate (critical path under the gate, W workers)\t%.0f\t\n", l.ChainOrderRPS)
		fmt.Fprintf(tw, "    the chain's ordering rules, key-scoped gate (critical path under the gate, W workers)\t%.0f\t\n", l.KeyOrderRPS)
		fmt.Fprintf(tw, "    key-parallel micro-batch, batch %d (stages one after another, a barrier per batch)\t%.0f\t\n", l.StrongestBatch, l.StrongestRPS)
		fmt.Fprintf(tw, "    key-parallel micro-batch, one batch of everything (no batch barrier left)\t%.0f\t\n", l.OneBatchRPS)
		fmt.Fprintf(tw, "    micro-batch baseline, batch %d (partition order)\t%.0f\t\n", r.BatchSize, l.Design6RPS)
		tw.Flush()
		fmt.Fprintf(b, "  the limit: if both reached their bounds, the chain would win %.2f× against the strongest micro-batch, and %.2f× against a\n"+
			"  key-parallel micro-batch of any batch size: what is left to win is pipelining across stages and no per-batch barrier\n", l.MaxWin, l.MaxWinAnyBatch)
	}
	if len(wr.Sweep) > 0 {
		b.WriteString("  strongest micro-batch, batch size sweep:\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "    batch\trecords\trec/s\ttime s\tckpt syncs\tcommits\tof own bound\tcorrect\t")
		var skipped []string
		for _, sp := range wr.Sweep {
			if sp.Result == nil {
				skipped = append(skipped, fmt.Sprintf("    %d: not run: %s\n", sp.BatchSize, sp.Skipped))
				continue
			}
			d := sp.Result
			mark := ""
			if sp.Chosen {
				mark = "  ← the strongest"
			}
			fmt.Fprintf(tw, "    %d\t%d\t%.0f\t%.2f\t%d\t%d\t%s\t%s\t%s\n", sp.BatchSize, d.Records, d.ThroughputRPS, d.Elapsed,
				d.Syncs, d.Commits, optf(d.EfficiencyOwn, "%.2f"), correctText(d.Correctness), mark)
		}
		tw.Flush()
		for _, s := range skipped {
			b.WriteString(s)
		}
	}

	wr.Floor.write(b, wr.Chain, wr.Strongest, wr.Design6)
	if wr.Floor != nil && wr.Chain == nil && wr.Strongest == nil && wr.Raw == nil {
		// FloorOnly: no design row to print.
		writeCores(b, wr.Cores, wr.Floor)
		return
	}
	b.WriteString("  throughput (each design on its own prefix of the stream, sized by time):\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "    design\trecords\trec/s\ttime s\tsteady\tckpt syncs\tbusiest\tcommits\tcpu s\tcpu µs/rec\theap MB\tefficiency\tof own bound\tof cpu bound\tfloor ÷ cpu\twait +%\tcorrect\t")
	for _, d := range wr.rows() {
		if d == nil {
			continue
		}
		over := "-"
		if d.WaitOvershoot != 0 {
			over = fmt.Sprintf("%.0f", 100*d.WaitOvershoot)
		}
		steady := "yes"
		if !d.Steady {
			steady = "no"
		}
		if kind(d.Design) == kindRaw || kind(d.Design) == kindNoop {
			steady = "-"
		}
		fmt.Fprintf(tw, "    %s\t%d\t%.0f\t%.2f\t%s\t%d\t%d\t%d\t%.2f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", designLabel(d), d.Records, d.ThroughputRPS, d.Elapsed,
			steady, d.Syncs, d.CheckpointsMost, d.Commits, d.CPUs, cpuPerRecordUs(d), d.PeakHeapMB, optf(d.Efficiency, "%.2f"), optf(d.EfficiencyOwn, "%.2f"),
			optf(wr.Floor.fraction(d), "%.2f"), optf(wr.Floor.share(d), "%.2f"), over, correctText(d.Correctness))
	}
	tw.Flush()

	for _, c := range []struct {
		cmp  *Comparison
		base *DesignResult
	}{{wr.VsStrongest, wr.Strongest}, {wr.VsDesign6, wr.Design6}} {
		if c.cmp == nil || c.cmp.Chain == nil || c.base == nil {
			continue
		}
		fmt.Fprintf(b, "  latency against the %s: %d records' outputs at %.0f rec/s offered", designLabel(c.base), c.cmp.LatencyRecords, c.cmp.LatencyRateRPS)
		b.WriteString("\n")
		floorLine(b, c.cmp)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "    design\tp50 ms\tp99 ms\toutputs\tckpt syncs\tcommits\tcorrect\t")
		for _, l := range []struct {
			name string
			r    *LatencyResult
		}{{"chain", c.cmp.Chain}, {designLabel(c.base), c.cmp.Base}} {
			if l.r == nil {
				continue
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\t%d\t%d\t%s\t\n", l.name, optf(l.r.P50ms, "%.1f"), optf(l.r.P99ms, "%.1f"), l.r.Outputs,
				l.r.Checkpoints, l.r.Commits, correctText(l.r.Correctness))
		}
		tw.Flush()
	}

	if c := wr.VsStrongest; c != nil {
		fmt.Fprintf(b, "  chain ÷ strongest micro-batch (the headline): throughput %.2f×", c.Throughput)
		if l := wr.Limit; l != nil {
			fmt.Fprintf(b, " (bounds allow %.2f×; chain at %s of its own bound, micro-batch at %s of its)", l.MaxWin,
				optf(wr.Chain.EfficiencyOwn, "%.2f"), optf(wr.Strongest.EfficiencyOwn, "%.2f"))
		}
		b.WriteString(p99Text(c.P99Lower) + "\n")
	}
	if c := wr.VsDesign6; c != nil {
		fmt.Fprintf(b, "  chain ÷ micro-batch baseline (the design the engine replaces): throughput %.2f×%s\n", c.Throughput, p99Text(c.P99Lower))
	}
	// The other chain variants (the other gate scope) against both
	// baselines, and the headline chain against each.
	for _, v := range wr.ChainVariants {
		if v == wr.Chain || v.ThroughputRPS <= 0 {
			continue
		}
		fmt.Fprintf(b, "  %s:", designLabel(v))
		for _, base := range []*DesignResult{wr.Strongest, wr.Design6} {
			if base != nil && base.ThroughputRPS > 0 {
				fmt.Fprintf(b, " ÷ %s %.2f×;", designLabel(base), v.ThroughputRPS/base.ThroughputRPS)
			}
		}
		fmt.Fprintf(b, " %s ÷ it %.2f×\n", designLabel(wr.Chain), wr.Chain.ThroughputRPS/v.ThroughputRPS)
	}
	if wr.RatioNoopRaw != nil {
		fmt.Fprintf(b, "  no-op chain ÷ raw consumer: %.2f (on %d records of the stream, median of %d paired ratios:%s)\n", *wr.RatioNoopRaw, wr.CeilingRecords, len(wr.NoopRawPairs), pairList(wr.NoopRawPairs))
		b.WriteString("    each pass in the harness process, beside its heap (stream, reference model, embedded broker); cpu s includes the embedded broker's\n")
	}
	if wr.RatioPolling != nil {
		fmt.Fprintf(b, "  polling fallback (buffer %d) ÷ buffered chain: %.2f  [%s]\n", r.PollingBufferSize, *wr.RatioPolling, wr.PollingChain.Note)
	}
	writeCores(b, wr.Cores, wr.Floor)
	wr.Velocity.write(b)
	for _, d := range []*DesignResult{wr.Chain, wr.Strongest, wr.Design6} {
		if d != nil && d.Note != "" {
			fmt.Fprintf(b, "  %s: %s\n", designLabel(d), d.Note)
		}
	}
}

// rows are the throughput table's runs, in order: the chain's variants
// (or the chain alone), the strongest micro-batch, the micro-batch
// baseline, the polling fallback, the ceilings. Some may be nil.
func (w *WorkloadResult) rows() []*DesignResult {
	chains := w.ChainVariants
	if len(chains) == 0 {
		chains = []*DesignResult{w.Chain}
	}
	return append(append([]*DesignResult(nil), chains...), w.Strongest, w.Design6, w.PollingChain, w.Raw, w.NoopChain)
}

// p99Text says how the chain's p99 compares: lower is the claim, so a
// higher one is said as such.
func p99Text(lower *float64) string {
	switch {
	case lower == nil:
		return ""
	case *lower >= 1:
		return fmt.Sprintf(", p99 %.1f× lower", *lower)
	}
	return fmt.Sprintf(", p99 %.1f× HIGHER (the chain's)", 1 / *lower)
}

// floorLine prints the chain's p99 beside the rules' event-time floor of
// a latency comparison.
func floorLine(b *strings.Builder, c *Comparison) {
	if c.RulesFloorP99ms == nil {
		return
	}
	fmt.Fprintf(b, "    the rules' event-time floor (%s gate, cascaded across stages): p50 %.1fms p99 %.1fms", c.RulesFloorGate, *c.RulesFloorP50ms, *c.RulesFloorP99ms)
	if c.Chain != nil && c.Chain.P99ms != nil && *c.RulesFloorP99ms > 0 {
		fmt.Fprintf(b, "; chain p99 = %.2f × it", *c.Chain.P99ms / *c.RulesFloorP99ms)
	}
	b.WriteString("\n")
}

// pairList is " 0.93 0.88 …" (two decimals each).
func pairList(q []float64) string {
	var b strings.Builder
	for _, v := range q {
		fmt.Fprintf(&b, " %.2f", v)
	}
	return b.String()
}
