package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Report is what Run measured, with the options it ran with (every
// default filled in). Its JSON form (WriteJSON) is the workloads' array.
type Report struct {
	Options    `json:"-"`
	Started    time.Time        `json:"-"`
	Broker     string           `json:"-"`
	GoVersion  string           `json:"-"`
	CPUs       int              `json:"-"`
	GOMAXPROCS int              `json:"-"`
	Workloads  []WorkloadResult `json:"-"`
	Targets    []Target         `json:"-"`
}

// WorkloadResult is one workload at one partition and worker count: one
// object of the JSON array.
type WorkloadResult struct {
	Workload   string `json:"workload"`
	Partitions int    `json:"partitions"`
	Workers    int    `json:"workers"`
	// KeyConcurrency is the chain's key concurrency per stage
	// (Options.KeyConcurrency; W unless set).
	KeyConcurrency int `json:"key_concurrency"`
	// Gate is the headline chain's gate scope (Options.Gate); a point that
	// compares scopes has both in ChainVariants.
	Gate string `json:"gate"`
	// Params describes the point's stream: the generator's configuration
	// (workload.Config.String) and the steady part kept.
	Params string `json:"params"`
	// DurationS is the least measured duration of every throughput run
	// (Options.Duration); CommitInterval the chain's (Options.CommitInterval).
	DurationS      float64 `json:"duration_s"`
	CommitInterval string  `json:"commit_interval"`

	// Chain is the headline chain's run (the first of ChainVariants when
	// there are several: gate scope, delivery guarantee, ...).
	Chain         *DesignResult   `json:"chain"`
	ChainVariants []*DesignResult `json:"chain_variants,omitempty"`
	// Strongest is the strongest micro-batch: per-key order, no linger,
	// all partitions' checkpoints in one synced batch, commits in the
	// background on a client of its own, at the batch size of the sweep's
	// best run. Design6 is the micro-batch baseline of DESIGN.md
	// "The micro-batch baseline": per-partition order, Options.BatchSize and BatchLinger, one
	// checkpoint per partition, synchronous commits.
	Strongest *DesignResult `json:"microbatch_strongest"`
	Design6   *DesignResult `json:"microbatch_design6"`
	// Sweep is the strongest micro-batch at each swept batch size.
	Sweep []SweepPoint `json:"sweep,omitempty"`

	Raw          *DesignResult `json:"raw,omitempty"`
	NoopChain    *DesignResult `json:"noop_chain,omitempty"`
	PollingChain *DesignResult `json:"polling_chain,omitempty"`

	// VsStrongest is the headline comparison; VsDesign6 the comparison with
	// the design the engine replaces.
	VsStrongest *Comparison `json:"vs_strongest"`
	VsDesign6   *Comparison `json:"vs_design6"`

	// Limit is what the analytical bounds allow on the chain's input (with
	// costs only).
	Limit *Limit `json:"limit,omitempty"`

	// RatioNoopRaw is the one-stage no-op chain ÷ raw consumer throughput,
	// measured on a separate input of CeilingRecords records: the median
	// of NoopRawPairs, the pairs' no-op ÷ raw (the two run back to back in
	// this process, the order alternating: raw first in the 1st, 3rd, …
	// pair).
	RatioNoopRaw   *float64  `json:"ratio_noop_raw,omitempty"`
	NoopRawPairs   []float64 `json:"noop_raw_pairs,omitempty"`
	CeilingRecords int       `json:"ceiling_records,omitempty"`
	// RatioPolling is the chain with a tiny buffer (followers poll Kafka) ÷
	// the chain with its default buffer.
	RatioPolling *float64 `json:"ratio_polling,omitempty"`
	// Velocity is the chain with the velocity stage (Options.Velocity).
	Velocity *VelocityResult `json:"velocity,omitempty"`
	// Floor is B's CPU floor and each design's fraction of its bound
	// (CPUFloor); Cores the cores sweep (Options.Cores).
	Floor *CPUFloor    `json:"cpu_floor,omitempty"`
	Cores []CoresPoint `json:"cores_sweep,omitempty"`
	// EOSCost is the exactly-once cost table (Options.EOSCost; the
	// designs' fields above are then empty).
	EOSCost *CostResult `json:"eos_cost,omitempty"`
}

// SweepPoint is the strongest micro-batch at one batch size.
type SweepPoint struct {
	BatchSize int           `json:"batch_size"`
	Result    *DesignResult `json:"result,omitempty"`
	// Skipped says why the size was not run.
	Skipped string `json:"skipped,omitempty"`
	// Chosen marks the best run: the strongest micro-batch.
	Chosen bool `json:"chosen,omitempty"`
}

// DesignResult is one design run's measurement (throughput phase).
type DesignResult struct {
	// Design is the kind of run: chain, microbatch_strongest,
	// microbatch_design6, raw, noop_chain, polling_chain.
	Design string `json:"design"`
	// Variant names a chain variant (empty for the default chain).
	Variant string `json:"variant,omitempty"`
	// BatchSize is a micro-batch's batch size.
	BatchSize int `json:"batch_size,omitempty"`
	// Records is the length of the stream's prefix the run consumed, sized
	// by time (see Options.Duration).
	Records       int     `json:"records"`
	ThroughputRPS float64 `json:"throughput_rps"`
	Elapsed       float64 `json:"elapsed_s"`
	// Steady: the run lasted at least Options.Duration and, for the chain,
	// its busiest partition paid at least ten checkpoints in it and Kafka
	// acknowledged at least ten of its commits.
	Steady bool `json:"steady"`
	// Syncs counts the synced checkpoint writes inside the measured window
	// (first record consumed → last complete): the chain's are one per
	// partition and interval, the micro-batch baseline's one per partition and batch, the
	// strongest micro-batch's one per batch. CheckpointsMost is how many
	// checkpoints the busiest partition got; Commits counts commits Kafka
	// acknowledged.
	Syncs           int     `json:"checkpoint_syncs"`
	CheckpointsMost int     `json:"checkpoints_busiest_partition"`
	Commits         int     `json:"commits"`
	CPUs            float64 `json:"cpu_s"`
	// GOMAXPROCS is the run's (the cores sweep sets it per run).
	GOMAXPROCS int `json:"gomaxprocs,omitempty"`
	// PeakHeapMB is the largest live heap of the process during the run (as
	// marked by the last GC, runtime/metrics /gc/heap/live:bytes; the
	// embedded broker's topics included). PeakHeapAllocMB also counts
	// garbage not yet collected (/memory/classes/heap/objects:bytes).
	PeakHeapMB      float64 `json:"peak_heap_mb"`
	PeakHeapAllocMB float64 `json:"peak_heap_alloc_mb"`
	// Efficiency is the pipelined bound's time ÷ the measured time (what
	// any correct design could reach; null without costs); EfficiencyOwn
	// the same for the bound of the run's own design: the chain's ordering
	// rules (Bound.ChainOrderTime), or the micro-batch's stages and
	// barriers at its batch size and order (stagedTime).
	Efficiency    *float64 `json:"efficiency"`
	EfficiencyOwn *float64 `json:"efficiency_own,omitempty"`
	// WaitOvershoot is how much longer the simulated costs' timers waited
	// than asked, overall (0.1 = 10% longer).
	WaitOvershoot float64 `json:"wait_overshoot,omitempty"`
	// SlotUse is how busy the cap W was: the time its slots were held
	// (simulated cost plus processor, the whole run) ÷ (W × the measured
	// window).
	SlotUse float64 `json:"slot_use,omitempty"`
	// SlotsIdle is the time no slot of W was held (no record in
	// processing anywhere: an exactly-once cycle's pause, the start-up)
	// ÷ the measured window.
	SlotsIdle   float64      `json:"slots_idle,omitempty"`
	Correctness *Correctness `json:"correctness,omitempty"`
	Note        string       `json:"note,omitempty"`

	// Latency-phase fields, moved to a LatencyResult by latencyPhase.
	P50ms, P99ms               *float64 `json:"-"`
	RulesFloorP50ms            *float64 `json:"-"`
	RulesFloorP99ms            *float64 `json:"-"`
	RulesFloorGate             string   `json:"-"`
	ProduceP50ms, ProduceP99ms *float64 `json:"-"`
	LatencyOutputs             int      `json:"-"`

	// windowCPU is the process CPU from the first record consumed to the
	// last complete (the floor's consume part).
	windowCPU time.Duration
	txn       *TxnStats // the cost table's runs (CostCell.Txn)
}

// LatencyResult is one design's latency-phase run.
type LatencyResult struct {
	P50ms *float64 `json:"p50_ms"`
	P99ms *float64 `json:"p99_ms"`
	// ProduceP50ms and ProduceP99ms are the same quantiles of the produce
	// path alone: acknowledgement − the design's Produce call (producer
	// linger, request, broker ack), the part of the latency after release.
	ProduceP50ms *float64 `json:"produce_p50_ms,omitempty"`
	ProduceP99ms *float64 `json:"produce_p99_ms,omitempty"`
	Outputs      int      `json:"outputs"`
	// Checkpoints (synced writes) and Commits during the run.
	Checkpoints int          `json:"checkpoint_syncs"`
	Commits     int          `json:"commits"`
	Correctness *Correctness `json:"correctness,omitempty"`
}

// Comparison is the chain against one baseline: throughput (each design on
// its own time-sized input) and latency at the same offered load.
type Comparison struct {
	// Baseline is microbatch_strongest or microbatch_design6.
	Baseline string `json:"baseline"`
	// Throughput is chain ÷ baseline records/s.
	Throughput float64 `json:"throughput_ratio"`
	// LatencyRateRPS is the offered load: LatencyLoad × the slower of the
	// two; LatencyRecords how many fed records' outputs were measured.
	LatencyRateRPS float64        `json:"latency_offered_rps,omitempty"`
	LatencyRecords int            `json:"latency_records,omitempty"`
	Chain          *LatencyResult `json:"chain_latency,omitempty"`
	Base           *LatencyResult `json:"baseline_latency,omitempty"`
	// RulesFloorP50ms and RulesFloorP99ms are the event-time floor the
	// rules impose (cascadeFloors): the gate of DESIGN.md "Mechanisms" of RulesFloorGate
	// applied stage after stage on the run's arrival times and cost draws,
	// with unlimited workers and no overhead — a lower bound on any engine
	// obeying the rules. The target is chain p99 ÷ RulesFloorP99ms.
	RulesFloorGate  string   `json:"rules_floor_gate,omitempty"`
	RulesFloorP50ms *float64 `json:"rules_floor_p50_ms,omitempty"`
	RulesFloorP99ms *float64 `json:"rules_floor_p99_ms,omitempty"`
	// P99Lower is baseline p99 ÷ chain p99 (3 = three times lower).
	P99Lower *float64 `json:"p99_lower,omitempty"`
}

// Limit is what the bounds say on the chain's input: rates (records/s)
// that no run of a design can exceed, and the most the chain can win.
type Limit struct {
	Records int `json:"records"`
	// Pipelined: any correct design (Bound.Time). ChainOrder: under the
	// chain's ordering rules with the partition-scoped gate
	// (Bound.ChainOrderTime); KeyOrder: with the key-scoped gate
	// (Bound.KeyOrderTime).
	PipelinedRPS  float64 `json:"pipelined_rps"`
	ChainOrderRPS float64 `json:"chain_order_rps"`
	KeyOrderRPS   float64 `json:"key_order_rps"`
	// Strongest: a key-parallel micro-batch at the strongest's batch size
	// (stagedTime); Batch0 with one batch of everything (no batch barrier
	// left, stages still one after another). Design6: per-partition order
	// at Options.BatchSize.
	StrongestBatch int     `json:"strongest_batch"`
	StrongestRPS   float64 `json:"strongest_rps"`
	OneBatchRPS    float64 `json:"one_batch_rps"`
	Design6RPS     float64 `json:"design6_rps"`
	// MaxWin = PipelinedRPS ÷ StrongestRPS: the most the chain can win
	// against the strongest micro-batch (pipelining across stages, no
	// per-batch barrier); MaxWinAnyBatch = PipelinedRPS ÷ OneBatchRPS,
	// against a key-parallel micro-batch of any batch size.
	MaxWin         float64 `json:"max_win"`
	MaxWinAnyBatch float64 `json:"max_win_any_batch"`
}

func (w *WorkloadResult) design(k kind) *DesignResult {
	switch k {
	case kindChain:
		return w.Chain
	case kindStrongest:
		return w.Strongest
	case kindDesign6:
		return w.Design6
	}
	return nil
}

// limits computes Limit on the chain's input.
func (w *WorkloadResult) limits(pr *pointRun, design6Batch int) {
	if w.Chain == nil || w.Strongest == nil {
		return
	}
	in := pr.st.inputs[w.Chain.Records]
	if in == nil {
		return
	}
	e := pr.expect(in)
	if e.bound.Time <= 0 {
		return
	}
	rate := func(d time.Duration) float64 { return float64(in.n) / d.Seconds() }
	l := &Limit{
		Records: in.n, PipelinedRPS: rate(e.bound.Time), ChainOrderRPS: rate(e.bound.ChainOrderTime), KeyOrderRPS: rate(e.bound.KeyOrderTime),
		StrongestBatch: w.Strongest.BatchSize, StrongestRPS: rate(e.stagedTime(w.Strongest.BatchSize, true)),
		OneBatchRPS: rate(e.stagedTime(0, true)), Design6RPS: rate(e.stagedTime(design6Batch, false)),
	}
	l.MaxWin, l.MaxWinAnyBatch = l.PipelinedRPS/l.StrongestRPS, l.PipelinedRPS/l.OneBatchRPS
	w.Limit = l
}

func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := a / b
	return &r
}

// medianOf is the median of q (the mean of the middle two of an even
// count).
func medianOf(q []float64) *float64 {
	s := slices.Clone(q)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return &m
}

func (w *WorkloadResult) ratios() {
	if len(w.NoopRawPairs) > 0 {
		w.RatioNoopRaw = medianOf(w.NoopRawPairs)
	} else if w.NoopChain != nil && w.Raw != nil {
		w.RatioNoopRaw = ratio(w.NoopChain.ThroughputRPS, w.Raw.ThroughputRPS)
	}
	if w.Chain == nil {
		return
	}
	for _, c := range []struct {
		to   **Comparison
		base *DesignResult
		k    kind
	}{{&w.VsStrongest, w.Strongest, kindStrongest}, {&w.VsDesign6, w.Design6, kindDesign6}} {
		if c.base == nil {
			continue
		}
		if *c.to == nil {
			*c.to = &Comparison{Baseline: string(c.k)}
		}
		cmp := *c.to
		if r := ratio(w.Chain.ThroughputRPS, c.base.ThroughputRPS); r != nil {
			cmp.Throughput = *r
		}
		if cmp.Chain != nil && cmp.Base != nil && cmp.Chain.P99ms != nil && cmp.Base.P99ms != nil {
			cmp.P99Lower = ratio(*cmp.Base.P99ms, *cmp.Chain.P99ms)
		}
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
	// Why says what else the target needs, when it is not met for that.
	Why string `json:"why,omitempty"`
	// Note qualifies a result, e.g. a ratio above what the bounds allow
	// (a baseline that ran further below its bound than the chain: a busy
	// machine's late timers, not the design).
	Note string `json:"note,omitempty"`
}

// targets checks the claims: against the strongest micro-batch (the
// headline: 3× the throughput and a 3× lower p99 on A, 1.5× on B),
// against DESIGN.md "The micro-batch baseline" (the design the engine
// replaces: A ≥ 10× and ≥ 15×, a 5× lower p99, B ≥ 1×), and the engine's
// own. The bounds leave no 15× against a key-parallel micro-batch, hence the
// lower targets against the strongest.
func targets(ws []WorkloadResult) []Target {
	var ts []Target
	add := func(name string, want float64, got *float64, steady bool) {
		if got == nil {
			return
		}
		t := Target{Name: name, Want: want, Got: *got, Met: *got >= want && steady}
		if *got >= want && !steady {
			t.Why = "a run was not steady state (shorter than Duration, or the chain paid fewer than 10 checkpoints on its busiest partition or fewer than 10 commits)"
		}
		ts = append(ts, t)
	}
	atMost := func(name string, want float64, got *float64) {
		if got != nil {
			ts = append(ts, Target{Name: name, Want: want, Got: *got, Met: *got <= want, AtMost: true})
		}
	}
	for i := range ws {
		w := &ws[i]
		if w.EOSCost != nil {
			ts = append(ts, w.EOSCost.targets(w.Workload)...)
		}
		if w.Chain == nil {
			continue
		}
		steady := w.Chain.Steady
		for _, d := range []*DesignResult{w.Strongest, w.Design6} {
			steady = steady && d != nil && d.Steady
		}
		var sTP, dTP, sP99, dP99 *float64
		if c := w.VsStrongest; c != nil {
			sTP, sP99 = &c.Throughput, c.P99Lower
		}
		if c := w.VsDesign6; c != nil {
			dTP, dP99 = &c.Throughput, c.P99Lower
		}
		switch w.Workload {
		case "A":
			add("A: chain ÷ strongest micro-batch throughput ≥", 3, sTP, steady)
			if l := w.Limit; l != nil && sTP != nil && *sTP > l.MaxWin && len(ts) > 0 {
				ts[len(ts)-1].Note = fmt.Sprintf("above the %.2f× the bounds allow: the micro-batch ran at %s of its bound, the chain at %s of its",
					l.MaxWin, optf(w.Strongest.EfficiencyOwn, "%.2f"), optf(w.Chain.EfficiencyOwn, "%.2f"))
			}
			add("A: strongest micro-batch ÷ chain p99 latency ≥", 3, sP99, true)
			add("A: chain ÷ micro-batch baseline throughput ≥", 10, dTP, steady)
			add("A: chain ÷ micro-batch baseline throughput, key-scoped gate ≥", 15, dTP, steady)
			if l, d := w.Limit, w.Design6; l != nil && d != nil && dTP != nil && d.ThroughputRPS > 0 && len(ts) > 0 && ts[len(ts)-1].Got == *dTP {
				// No engine obeying the chain's rules runs faster than their
				// bound on the chain's input: this is the most any of them
				// could show against this micro-batch baseline run.
				bound, scope := l.KeyOrderRPS, "key"
				if w.Gate == string(chain.GatePartition) {
					bound, scope = l.ChainOrderRPS, "partition"
				}
				if bound > 0 {
					ts[len(ts)-1].Note = fmt.Sprintf("at most %.2f× for any engine obeying the rules: their bound (%s gate) on the chain's input ÷ this baseline run; the chain at %s of it",
						bound/d.ThroughputRPS, scope, optf(w.Chain.EfficiencyOwn, "%.2f"))
				}
			}
			n0 := len(ts)
			add("A: micro-batch baseline ÷ chain p99 latency ≥", 5, dP99, true)
			if c := w.VsDesign6; len(ts) > n0 && c != nil && c.Base != nil && c.Base.P99ms != nil && c.RulesFloorP99ms != nil && *c.RulesFloorP99ms > 0 {
				// Every output's latency is at least its floor, so no engine
				// obeying the rules has a p99 below the floor's: this is the
				// most any of them could show against this baseline run.
				ts[len(ts)-1].Note = fmt.Sprintf("at most %.2f for any engine obeying the rules: the baseline's p99 ÷ the rules' event-time floor p99", *c.Base.P99ms / *c.RulesFloorP99ms)
			}
			for _, c := range []struct {
				name string
				cmp  *Comparison
			}{{"strongest", w.VsStrongest}, {"baseline", w.VsDesign6}} {
				if c.cmp == nil || c.cmp.Chain == nil || c.cmp.Chain.P99ms == nil {
					continue
				}
				if fl := c.cmp.RulesFloorP99ms; fl != nil {
					atMost("A: chain p99 ÷ event-time floor p99 (the rules', cascaded), at the "+c.name+" comparison's load ≤", 1.1, ratio(*c.cmp.Chain.P99ms, *fl))
				}
			}
			add("A: chain efficiency (of the pipelined bound) ≥", 0.9, w.Chain.Efficiency, steady)
		case "B":
			add("B: chain ÷ strongest micro-batch throughput, checkpoints inside the window ≥", 1.5, sTP, steady)
			add("B: chain ÷ micro-batch baseline throughput ≥", 1, dTP, steady)
			add("B: one-stage no-op chain ÷ raw consumer ≥", 0.9, w.RatioNoopRaw, true)
			add("B: polling fallback ÷ buffered chain ≥", 0.7, w.RatioPolling, steady && w.PollingChain != nil && w.PollingChain.Steady)
		}
	}
	return ts
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

func (r *Report) write(jsonPath string) error {
	if jsonPath == "" {
		return nil
	}
	return writeFile(jsonPath, r.WriteJSON)
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

func optf(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func correctText(c *Correctness) string {
	if c == nil {
		return "-"
	}
	if !c.OK {
		return "FAIL"
	}
	return fmt.Sprintf("ok %d+%d", c.Outputs, c.DeadLetters)
}
