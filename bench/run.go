package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/bench/microbatch"
	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// ErrIncorrect is wrapped by Run's error when a design lost, duplicated or
// changed an output (or a dead letter): the run fails, whatever its speed.
var ErrIncorrect = errors.New("bench: a design's output differs from the reference model")

// Run measures every workload of opts (see Options and the package doc) and
// returns the report. It writes the JSON report when JSONPath is set (its
// folder is created and checked before anything is measured).
// It fails — with the report so far — when a design loses or duplicates a
// record's output (ErrIncorrect), stalls past Timeout, or errors.
func Run(ctx context.Context, opts Options) (Report, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return Report{}, fmt.Errorf("bench: %w", err)
	}
	c, err := openBroker(o.Brokers)
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = c.Close() }()
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	rep := Report{Options: o, Started: time.Now().UTC(), Broker: "embedded kfake (in-process)", GoVersion: runtime.Version(),
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if len(o.Brokers) > 0 {
		rep.Broker = fmt.Sprint(o.Brokers)
	}
	for _, pt := range o.points() {
		run := h.runPoint
		if o.EOSCost {
			run = h.runCost
		}
		wr, err := run(ctx, pt)
		if wr != nil {
			rep.Workloads = append(rep.Workloads, *wr)
		}
		if err != nil {
			rep.Targets = targets(rep.Workloads)
			return rep, err
		}
	}
	rep.Targets = targets(rep.Workloads)
	if err := rep.write(o.JSONPath); err != nil {
		return rep, err
	}
	return rep, nil
}

type harness struct {
	o   Options
	c   *broker
	cfg attribution.Config
}

func (h *harness) progressf(format string, args ...any) {
	fmt.Fprintf(h.o.Progress, "bench: "+format+"\n", args...)
}

// pointRun is one point's stream and the inputs cut from it.
type pointRun struct {
	h      *harness
	pt     point
	st     *stream
	topics []string
}

// input returns the stream's prefix of n records in a topic of its own
// (produced once per point and length). When the stream is shorter than n,
// it is generated again, half as long again as n (the runs already made
// keep their results: every prefix is the same stream).
func (pr *pointRun) input(n int) (*input, error) {
	if n > len(pr.st.recs) {
		t0 := time.Now()
		pr.st = newStream(pr.pt.wc, n*3/2)
		pr.h.progressf("  stream regenerated for a longer input: %s (%v)", pr.st, time.Since(t0).Round(time.Millisecond))
	}
	if in, ok := pr.st.inputs[n]; ok {
		return in, nil
	}
	P := pr.pt.wc.Partitions
	in := &input{n: n, recs: pr.st.recs[:n], ends: make([]int64, P)}
	for i := range in.recs {
		in.ends[in.recs[i].Partition]++
	}
	topic, err := pr.h.c.createTopic("in", P)
	if err != nil {
		return nil, err
	}
	pr.topics = append(pr.topics, topic)
	if err := pr.h.c.produceAll(topic, in.recs, P); err != nil {
		return nil, err
	}
	in.topic = topic
	pr.st.inputs[n] = in
	return in, nil
}

// expect returns the model of an input (computed once).
func (pr *pointRun) expect(in *input) *expectation {
	if in.exp == nil {
		in.exp = newExpectation(in.recs, pr.pt.wc.Partitions, pr.pt.workers, pr.h.cfg, pr.h.o.IdleTimeout)
	}
	return in.exp
}

func (pr *pointRun) close() { pr.h.c.deleteTopics(pr.topics...) }

// meanCost is the mean of the workload's log-normal cost draw.
func meanCost(wc workload.Config) float64 {
	return wc.CostMedian.Seconds() * math.Exp(workload.CostSigma*workload.CostSigma/2)
}

// chainGuess is a first guess of the chain's throughput at a point, to size
// its first run: with costs a third of W ÷ mean cost (no design exceeds
// that; the hot keys hold the chain well below it), else a CPU-bound
// guess. A wrong guess costs one more run (see steady).
func chainGuess(pt point) float64 {
	if pt.wc.CostMedian > 0 {
		return float64(pt.workers) / meanCost(pt.wc) / 3
	}
	return 40_000
}

// runPoint measures one configuration: the chain, the micro-batch baseline
// and the sweep of the strongest micro-batch (each on a prefix of the
// point's stream sized by its own throughput), the ceilings when asked,
// then the latency phase of each comparison.
func (h *harness) runPoint(ctx context.Context, pt point) (*WorkloadResult, error) {
	P := pt.wc.Partitions
	t0 := time.Now()
	pr := h.newPointRun(pt)
	defer pr.close()
	kc := h.o.chainKeyConcurrency(pt)
	wr := &WorkloadResult{Workload: pt.name, Partitions: P, Workers: pt.workers, KeyConcurrency: kc, Gate: string(h.o.Gate),
		DurationS: h.o.Duration.Seconds(), CommitInterval: h.o.CommitInterval.String()}
	h.progressf("workload %s P=%d W=%d (chain key concurrency %d): %s (generated in %v)", pt.name, P, pt.workers, kc, pr.st, time.Since(t0).Round(time.Millisecond))
	if pt.floor && h.o.FloorOnly {
		err := h.floorAndCores(ctx, pr, wr)
		wr.Params = pr.st.String()
		return wr, err
	}

	// The chain first, each variant a row (the first is the headline's):
	// its throughput sizes the inputs of what follows.
	variants := h.o.chainVariants(pt)
	for i := range variants {
		hint := chainGuess(pt)
		if i > 0 {
			hint = wr.ChainVariants[0].ThroughputRPS
		}
		r, err := h.steady(ctx, pr, runSpec{kind: kindChain, variant: &variants[i]}, hint)
		if err != nil {
			return wr, err
		}
		wr.ChainVariants = append(wr.ChainVariants, r)
	}
	ch := wr.ChainVariants[0]
	if len(variants) == 1 {
		wr.ChainVariants = nil
	}
	// First guesses of the baselines' throughput, from the chain's (the
	// earlier benchmark's ratios); each run sizes the next.
	d6Hint, strongHint := ch.ThroughputRPS/2, ch.ThroughputRPS
	if pt.wc.CostMedian > 0 {
		d6Hint, strongHint = ch.ThroughputRPS/12, ch.ThroughputRPS/3
	}
	d6, err := h.steady(ctx, pr, runSpec{kind: kindDesign6, batch: h.o.BatchSize}, d6Hint)
	if err != nil {
		return wr, err
	}
	sweep, strong, err := h.sweep(ctx, pr, strongHint)
	wr.Sweep = sweep
	if err != nil {
		return wr, err
	}
	chains, d6s, strongs := []*DesignResult{ch}, []*DesignResult{d6}, []*DesignResult{strong}
	// The chain with the velocity stage (Options.Velocity, B only), on the
	// plain chain's input, after it in each repeat.
	in, err := pr.input(ch.Records)
	if err != nil {
		return wr, err
	}
	vel, velResult := h.velocitySpec(pt, in)
	var vels []*DesignResult
	runVelocity := func() error {
		if vel == nil {
			return nil
		}
		v, err := h.measure(ctx, *vel)
		if err != nil {
			return err
		}
		v.Records = ch.Records
		vels = append(vels, v)
		return nil
	}
	if err := runVelocity(); err != nil {
		return wr, err
	}
	for range h.o.Repeats - 1 {
		c, err := h.measureOn(ctx, pr, runSpec{kind: kindChain, variant: &variants[0]}, ch.Records, false)
		if err != nil {
			return wr, err
		}
		chains = append(chains, c)
		if err := runVelocity(); err != nil {
			return wr, err
		}
		for _, run := range []struct {
			spec runSpec
			to   *[]*DesignResult
			n    int
		}{
			{runSpec{kind: kindDesign6, batch: h.o.BatchSize}, &d6s, d6.Records},
			{runSpec{kind: kindStrongest, batch: strong.BatchSize}, &strongs, strong.Records},
		} {
			r, err := h.measureOn(ctx, pr, run.spec, run.n, false)
			if err != nil {
				return wr, err
			}
			*run.to = append(*run.to, r)
		}
	}
	wr.Chain, wr.Design6, wr.Strongest = median(chains), median(d6s), median(strongs)
	if len(wr.ChainVariants) > 0 {
		wr.ChainVariants[0] = wr.Chain
	}
	if velResult != nil {
		velResult.Chain = median(vels)
		velResult.finish(wr.Chain, ch.Records)
		wr.Velocity = velResult
	}
	wr.limits(pr, h.o.BatchSize)

	if pt.ceiling {
		if err := h.ceilings(ctx, pr, wr); err != nil {
			return wr, err
		}
		// On the chain's own input, not a prefix sized by the fallback's
		// throughput: both runs must read the same records for their ratio
		// to mean anything (a longer prefix costs more per record — more
		// records per partition than the buffer holds, more checkpoints).
		if wr.PollingChain, err = h.measureOn(ctx, pr, runSpec{kind: kindPolling}, wr.Chain.Records, false); err != nil {
			return wr, err
		}
	}
	if pt.floor {
		if err := h.floorAndCores(ctx, pr, wr); err != nil {
			return wr, err
		}
	}
	if pt.latency && !h.o.NoLatency {
		for _, base := range []kind{kindStrongest, kindDesign6} {
			if err := h.latencyPhase(ctx, pr, wr, base); err != nil {
				return wr, err
			}
		}
	}
	wr.ratios()
	wr.Params = pr.st.String()
	return wr, nil
}

// steady measures one design on a prefix of the point's stream sized by
// time: first at the size hint (records/s) asks for, then, while the run
// lasted less than Duration, again at the size its own throughput asks for
// (at least one ladder step longer). Runs shorter than Duration are sizing
// runs, not results. With Options.Records the prefix is fixed.
func (h *harness) steady(ctx context.Context, pr *pointRun, s runSpec, hint float64) (*DesignResult, error) {
	o := h.o
	o.Duration = o.leastDuration(s.variant)
	n := o.Records
	if n == 0 {
		n = o.sizeFor(hint, s.batch)
	}
	const tries = 6
	for try := 1; ; try++ {
		// The last try is checked and reported whatever its length.
		r, err := h.measureOn(ctx, pr, s, n, try < tries)
		if err != nil || o.Records > 0 || r.Steady || try == tries {
			return r, err
		}
		next := nextSize(o, r, n, s.batch, s.kind.isChain())
		h.progressf("    %.2fs is shorter than %v (or too few checkpoints): again on %d records", r.Elapsed, o.Duration, next)
		n = next
	}
}

// nextSize is the prefix the next sizing run of steady uses after a run on
// n records that was not steady: what the run's throughput asks for to last
// Duration, at least one ladder step (×1.5) longer, and — when the run had
// too few checkpoints or commits on its busiest partition, which happens
// when a cycle takes longer than the commit interval (an exactly-once cycle
// waits for the records below its cut) — long enough for Options.steadyCheckpoints at
// the rate this run made them, with a quarter to spare (a chain's runs
// only: the micro-batch's steadiness counts no checkpoints). Growing by one
// step per try instead ran out of tries on a loaded machine (CI).
func nextSize(o Options, r *DesignResult, n, batch int, chain bool) int {
	next := max(o.sizeFor(r.ThroughputRPS, batch), ladder(float64(n)*1.5))
	if short, want := min(r.CheckpointsMost, r.Commits), o.steadyCheckpoints(); chain && r.Elapsed >= o.Duration.Seconds() && short < want {
		next = max(next, ladder(float64(n)*1.25*float64(want)/float64(max(short, 1))))
	}
	return next
}

// measureOn measures one design run on the stream's prefix of n records.
// With sizing, a run shorter than it must be is only a sizing run: neither
// checked nor modelled.
func (h *harness) measureOn(ctx context.Context, pr *pointRun, s runSpec, n int, sizing bool) (*DesignResult, error) {
	in, err := pr.input(n)
	if err != nil {
		return nil, err
	}
	s.pt, s.topic, s.ends = pr.pt, in.topic, in.ends
	s.expect = func() *expectation { return pr.expect(in) }
	least := h.o.leastDuration(s.variant).Seconds()
	if sizing && h.o.Records == 0 {
		s.minElapsed = least
	}
	r, err := h.measure(ctx, s)
	if r != nil {
		r.Records = n
		r.Steady = r.Elapsed >= least && (!s.kind.isChain() || r.CheckpointsMost >= h.o.steadyCheckpoints() && r.Commits >= h.o.steadyCheckpoints())
		if s.variant != nil {
			r.Variant = s.variant.name
		}
	}
	return r, err
}

// chainVariant is one configuration of the chain, measured at every point
// as a row of its own (WorkloadResult.ChainVariants); the first is the
// headline's. The gate scope is one dimension: A and C measure
// the chain under Options.Gate (the headline) and, unless OneGate, under
// the other scope. Further dimensions go here too, e.g. the delivery
// guarantee with its commit interval — each a name, its gate
// scope, its chain options and, if it differs, its commit interval.
type chainVariant struct {
	// name labels the row ("" for the default chain).
	name string
	// gate is the attribution chain's follower gate scope (empty:
	// Options.Gate).
	gate chain.GateScope
	// options are added to the chain's (after the bench's own).
	options []chain.Option
	// commitInterval, when set, replaces Options.CommitInterval; the
	// variant's runs then last at least 12.5 of its intervals.
	commitInterval time.Duration
	// guarantee, when set (the exactly-once cost table), gives the chain a
	// changelog and, for exactly-once, a Transactor instead of the
	// producer (costWiring).
	guarantee string
}

// chainVariants are the chain configurations Run measures at point pt:
// the chain under Options.Gate first (the headline's), then, where the
// point compares gate scopes (pt.gates), under the other scope.
func (o Options) chainVariants(pt point) []chainVariant {
	vs := []chainVariant{{name: string(o.Gate) + " gate", gate: o.Gate}}
	if pt.gates {
		g := o.otherGate()
		vs = append(vs, chainVariant{name: string(g) + " gate", gate: g})
	}
	return vs
}

// gateOf is the gate scope of a chain run of variant v (nil: the default
// chain, as the polling-fallback and velocity runs use).
func (o Options) gateOf(v *chainVariant) chain.GateScope {
	if v != nil && v.gate != "" {
		return v.gate
	}
	return o.Gate
}

// commitInterval is the chain's commit interval in a run of variant v.
func (o Options) commitInterval(v *chainVariant) time.Duration {
	if v != nil && v.commitInterval > 0 {
		return v.commitInterval
	}
	return o.CommitInterval
}

// leastDuration is how long a throughput run of variant v (nil: not the
// chain) must last: Duration, and for a variant with a longer commit
// interval than Options.CommitInterval, 12.5 of its intervals.
func (o Options) leastDuration(v *chainVariant) time.Duration {
	if v != nil && v.commitInterval > 0 {
		return max(o.Duration, v.commitInterval*25/2)
	}
	return o.Duration
}

// minCheckpoints is how many checkpoints the chain's busiest partition must
// pay, and how many commits Kafka must acknowledge, inside a measured run
// for it to count as steady state.
const minCheckpoints = 10

// sweep measures the strongest micro-batch at each of SweepBatchSizes and
// returns every point and the best run. A size whose one batch would last
// longer than 2 × Duration at the best throughput so far is skipped.
func (h *harness) sweep(ctx context.Context, pr *pointRun, hint float64) ([]SweepPoint, *DesignResult, error) {
	var pts []SweepPoint
	var best *DesignResult
	rate := hint
	for _, n := range h.o.SweepBatchSizes {
		if best != nil && float64(n)/best.ThroughputRPS > 2*h.o.Duration.Seconds() {
			pts = append(pts, SweepPoint{BatchSize: n, Skipped: fmt.Sprintf("one batch would last ~%.1fs at %.0f rec/s, more than 2 × the %v a run lasts",
				float64(n)/best.ThroughputRPS, best.ThroughputRPS, h.o.Duration)})
			continue
		}
		r, err := h.steady(ctx, pr, runSpec{kind: kindStrongest, batch: n}, rate)
		if err != nil {
			return pts, best, err
		}
		pts = append(pts, SweepPoint{BatchSize: n, Result: r})
		if best == nil || r.ThroughputRPS > best.ThroughputRPS {
			best = r
		}
		rate = r.ThroughputRPS
	}
	for i := range pts {
		pts[i].Chosen = pts[i].Result == best
	}
	return pts, best, nil
}

// ceilings measures the raw consumer and the one-stage no-op chain on a
// prefix of ceilingRecords, or the whole stream if shorter (they read
// hundreds of thousands of records per second, so a run of Duration would
// need millions), in ceilingPairs pairs run back to back, the order
// alternating; the median run of each kind is reported, and the ratio is
// the median of the pairs' ratios. They keep no state: the steady-state
// rule is for the designs. They run in this process, beside the stream,
// the reference model and the embedded broker, whose heap a deployed
// consumer does not hold: the report says so, and gives each pass's heap.
func (h *harness) ceilings(ctx context.Context, pr *pointRun, wr *WorkloadResult) error {
	n := ceilingRecords
	switch {
	case h.o.Records > 0:
		n = h.o.Records
	case h.o.Quick:
		n = ceilingRecords / 10
	}
	// An input already produced, if one is long enough; no longer than the
	// stream (a longer one would mean generating it again).
	if m := pr.shortestFrom(n); m > 0 {
		n = m
	}
	n = min(n, len(pr.st.recs))
	in, err := pr.input(n)
	if err != nil {
		return err
	}
	wr.CeilingRecords = n
	runs := map[kind][]*DesignResult{}
	for i := range ceilingPairs {
		// Each pair runs back to back, the order alternating, so a pair
		// shares the machine's state of the moment (a neighbour's load)
		// and each order runs as often.
		order := []kind{kindRaw, kindNoop}
		if i%2 == 1 {
			order = []kind{kindNoop, kindRaw}
		}
		pair := map[kind]*DesignResult{}
		for _, k := range order {
			r, err := h.measure(ctx, runSpec{kind: k, pt: pr.pt, topic: in.topic, ends: in.ends})
			if err != nil {
				return err
			}
			r.Records = n
			runs[k] = append(runs[k], r)
			pair[k] = r
		}
		if q := ratio(pair[kindNoop].ThroughputRPS, pair[kindRaw].ThroughputRPS); q != nil {
			wr.NoopRawPairs = append(wr.NoopRawPairs, *q)
		}
	}
	wr.Raw, wr.NoopChain = median(runs[kindRaw]), median(runs[kindNoop])
	return nil
}

// ceilingPairs is how many raw/no-op pairs the ceiling measurement runs.
// Each pass reads the input in about a third of a second, so one pass that
// meets a neighbour's burst or a GC cycle of the harness's heap moves a
// pair's ratio by 0.2 or more; the median of ten pairs does not move so.
const ceilingPairs = 10

// shortestFrom is the shortest input produced so far at the point with at
// least n records (0: none).
func (pr *pointRun) shortestFrom(n int) int {
	best := 0
	for k := range pr.st.inputs {
		if k >= n && (best == 0 || k < best) {
			best = k
		}
	}
	return best
}

// ceilingRecords is the least input of the ceiling measurement.
const ceilingRecords = 300_000

// latencyPhase compares the chain's latency with one baseline's: a fresh
// prefix of the stream is fed to a fresh, empty topic per design: one
// second's worth at once (consumed as a backlog and not measured: the
// designs start up), then, once the design has completed those, the
// following records open loop (a schedule that never waits for the
// consumer) at LatencyLoad × the slower of the two designs' throughput, for
// LatencyDuration and then up to one more second that is not measured (a
// log's last records wait for the idle release; a stream never ends).
func (h *harness) latencyPhase(ctx context.Context, pr *pointRun, wr *WorkloadResult, base kind) error {
	b := wr.design(base)
	rate := h.o.LatencyLoad * min(wr.Chain.ThroughputRPS, b.ThroughputRPS)
	d := h.o.LatencyDuration
	li, err := h.latencyInput(pr, rate, d, min(latencyTail, d/2))
	if err != nil {
		return err
	}
	cmp := &Comparison{Baseline: string(base), LatencyRateRPS: rate, LatencyRecords: li.measured}
	for _, k := range []kind{kindChain, base} {
		batch := 0
		if k != kindChain {
			batch = b.BatchSize
		}
		r, err := h.latencyRun(ctx, li, runSpec{kind: k, batch: batch, variant: &h.o.chainVariants(pr.pt)[0]})
		if err != nil {
			return err
		}
		if k == kindChain {
			cmp.Chain = r.latencyResult()
			cmp.RulesFloorGate, cmp.RulesFloorP50ms, cmp.RulesFloorP99ms = r.RulesFloorGate, r.RulesFloorP50ms, r.RulesFloorP99ms
		} else {
			cmp.Base = r.latencyResult()
		}
	}
	if base == kindStrongest {
		wr.VsStrongest = cmp
	} else {
		wr.VsDesign6 = cmp
	}
	return nil
}

// pacedInput is the input of a latency phase: its records, its model and
// how they are fed.
type pacedInput struct {
	pr             *pointRun
	exp            *expectation
	rate           float64
	warm, measured int
}

// latencyInput cuts a latency phase's input from the point's stream: one
// second's worth at rate (at least 100 records; fed at once and not
// measured), then d's worth to measure and tail's more, not measured.
func (h *harness) latencyInput(pr *pointRun, rate float64, d, tail time.Duration) (*pacedInput, error) {
	warm := max(int(rate), 100)
	n := max(int(rate*(d+tail).Seconds()), 2)
	if warm+n > len(pr.st.recs) {
		if _, err := pr.input(warm + n); err != nil { // regenerates the stream
			return nil, err
		}
	}
	measured := max(int(float64(n)*d.Seconds()/(d+tail).Seconds()), 1)
	exp := newExpectation(pr.st.recs[:warm+n], pr.pt.wc.Partitions, pr.pt.workers, h.cfg, h.o.IdleTimeout)
	return &pacedInput{pr: pr, exp: exp, rate: rate, warm: warm, measured: measured}, nil
}

// latencyRun measures s (its kind, batch and variant) on li's input, fed
// to a fresh topic of its own.
func (h *harness) latencyRun(ctx context.Context, li *pacedInput, s runSpec) (*DesignResult, error) {
	topic, err := h.c.createTopic("lat", li.pr.pt.wc.Partitions)
	if err != nil {
		return nil, err
	}
	defer h.c.deleteTopics(topic)
	s.pt, s.topic, s.ends, s.exp = li.pr.pt, topic, li.exp.ends, li.exp
	s.paceRate, s.warm, s.measured = li.rate, li.warm, li.measured
	return h.measure(ctx, s)
}

// latencyResult is the latency part of a latency phase's run.
func (r *DesignResult) latencyResult() *LatencyResult {
	return &LatencyResult{P50ms: r.P50ms, P99ms: r.P99ms, ProduceP50ms: r.ProduceP50ms, ProduceP99ms: r.ProduceP99ms,
		Outputs: r.LatencyOutputs, Correctness: r.Correctness, Checkpoints: r.Syncs, Commits: r.Commits}
}

// kind is a measured consumer.
type kind string

const (
	kindChain     kind = "chain"
	kindDesign6   kind = "microbatch_design6"
	kindStrongest kind = "microbatch_strongest"
	kindRaw       kind = "raw"
	kindNoop      kind = "noop_chain"
	kindPolling   kind = "polling_chain"
)

func (k kind) isChain() bool { return k == kindChain || k == kindPolling }

// runSpec is one design run.
type runSpec struct {
	kind  kind
	pt    point
	topic string
	ends  []int64      // records per partition of the input
	exp   *expectation // nil for the ceilings (no outputs to check)
	// expect, when exp is nil, builds it once the run is known to count:
	// a run shorter than minElapsed only sizes the next one, and is
	// neither checked nor modelled (the model of a long input costs
	// seconds).
	expect     func() *expectation
	minElapsed float64
	batch      int           // micro-batch batch size
	variant    *chainVariant // the chain's (nil: the default chain)
	// paceRate > 0: the latency phase (feed exp.recs[:warm] into the empty
	// topic at once, the rest at this rate once those are complete);
	// latency is measured for the outputs of exp.recs[warm:warm+measured].
	paceRate       float64
	warm, measured int
	// cfg, when set, replaces the harness's rules (the velocity runs).
	cfg *attribution.Config
}

// latencyTail is how long the latency phase goes on feeding after the
// records whose latency it measures (at most half of LatencyDuration).
const latencyTail = time.Second

// measure runs one design over one input until every record is complete,
// then stops it, checks its outputs and, in the latency phase, computes the
// latencies. The design runs in a goroutine of its own (its result on
// errc), beside the sampler of its heap and, in the latency phase, the
// feeder; Options.Timeout bounds the whole run.
func (h *harness) measure(ctx context.Context, s runSpec) (*DesignResult, error) {
	wall := time.Now()
	d, err := h.newDesign(s)
	if err != nil {
		return nil, err
	}
	defer d.close()
	phase := "throughput"
	if s.paceRate > 0 {
		phase = fmt.Sprintf("latency @ %.0f rec/s", s.paceRate)
	}
	what := fmt.Sprintf("%s (%s)", s.kind, phase)
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	stopped := false // errc was read
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-errc
	}
	cpu0, smp := cpuTime(), startSampler()
	go func() { errc <- d.run(runCtx) }()
	timeout := time.NewTimer(h.o.Timeout)
	var fed chan error // the feeder's result (nil: none, or read)
	defer func() {
		// The feeder first: it waits for the design's progress.
		if fed != nil {
			cancel()
			<-fed
		}
		_ = stop()
		smp.finish()
		timeout.Stop()
	}()

	select { // every partition assigned
	case <-d.ready:
	case err := <-errc:
		stopped = true
		return nil, fmt.Errorf("bench: %s stopped before consuming: %w", what, err)
	case <-timeout.C:
		return nil, fmt.Errorf("bench: %s: no partition assigned after %v", what, h.o.Timeout)
	}
	tReady := time.Since(wall)
	var f *feeder // read only after fed delivers
	if s.paceRate > 0 {
		// The warm-up records at once, then the rest at the paced rate once
		// the design completed the warm-up.
		fed = make(chan error, 1)
		go func() {
			var err error
			f, err = h.c.pace(runCtx, s.topic, s.exp.recs, s.pt.wc.Partitions, s.paceRate, s.warm, func(ctx context.Context) error {
				return d.prog.reached(ctx, int64(s.warm))
			})
			fed <- err
		}()
	}
	// await waits for ch, unless the design ends or the run times out first.
	await := func(ch <-chan struct{}, when string, stalled func() error) error {
		select {
		case <-ch:
			return nil
		case err := <-errc:
			stopped = true
			if err == nil {
				err = errors.New("stopped early")
			}
			return fmt.Errorf("bench: %s%s: %w", what, when, err)
		case <-timeout.C:
			return stalled()
		}
	}
	if err := await(d.prog.done, "", func() error { // every record complete
		return fmt.Errorf("bench: %s stalled: %d of %d records complete after %v", what, d.prog.completed(), d.prog.total(), h.o.Timeout)
	}); err != nil {
		return nil, err
	}
	cpu := cpuTime()
	// The CPU from the first record consumed: without the start-up (the
	// group join), which dominates a short run.
	var windowCPU time.Duration
	if c := d.prog.firstCPU.Load(); c > 0 {
		windowCPU = cpu - time.Duration(c)
	}
	tDone := time.Since(wall)
	smp.finish()
	var note string
	if d.note != nil {
		note = d.note()
	}
	// Every record was consumed, so every one was sent; the design is
	// stopped and its producer and store flushed, so that its outputs can be
	// read back.
	if fed != nil {
		err := <-fed
		fed = nil
		if err != nil {
			return nil, err
		}
	}
	if s.kind.isChain() {
		// A chain is stopped once it has committed every record, outside
		// the measured window: a stop commits what is left in a final
		// cycle, and a final exactly-once transaction that aborts leaves
		// its outputs to the next owner, which a benchmark run does not
		// have — they would read back as lost.
		if err := await(d.prog.cdone, " before committing every record", func() error {
			return fmt.Errorf("bench: %s: every record complete, but not committed after %v", what, h.o.Timeout)
		}); err != nil {
			return nil, err
		}
	}
	if err := stop(); err != nil {
		return nil, fmt.Errorf("bench: %s failed when stopping: %w", what, err)
	}
	if err := d.flush(); err != nil {
		return nil, err
	}
	tStop := time.Since(wall)

	r := d.result(s, cpu-cpu0, windowCPU, smp)
	r.Note = note
	if d.txn != nil {
		r.txn = d.txn.stats(r.Elapsed)
		r.Note += fmt.Sprintf("; send→ack mean %.1fms; %d changelog appends (mean %.1fms)", r.txn.SendMeanMs, r.txn.Appends, r.txn.AppendMeanMs)
		if r.txn.Commits > 0 || r.txn.Aborts > 0 {
			r.Note += fmt.Sprintf("; %d txns, commit mean %.1fms (max %.1fms), commit path mean %.1fms = %.0f%% of the window; %d aborts",
				r.txn.Commits, r.txn.CommitMeanMs, r.txn.CommitMaxMs, r.txn.PathMeanMs, 100*r.txn.PathFraction, r.txn.Aborts)
		}
	}
	switch {
	case s.exp == nil && s.expect != nil && r.Elapsed < s.minElapsed:
		r.Note = "sizing run, shorter than Duration: not a result, not checked"
	case s.exp == nil && s.expect != nil:
		s.exp = s.expect()
	}
	if s.exp != nil {
		r.efficiency(s, s.exp, h.o.gateOf(s.variant))
		if d.out != "" {
			if err := h.judge(d, s, phase, r); err != nil {
				return r, err
			}
		}
	}
	if s.paceRate > 0 && d.acks != nil {
		h.latency(s, d.acks.acks, f, r)
	}
	name := string(s.kind)
	if s.variant != nil && s.variant.guarantee != "" {
		name = s.variant.name
	}
	if s.batch > 0 {
		name += fmt.Sprintf(" batch %d", s.batch)
	}
	h.progressf("  %-28s %-24s %7d rec %8.0f rec/s %6.2fs  ckpt %3d (busiest partition %2d) commits %3d  cpu %5.1fs  heap %6.1f MB%s%s  [wall %.1fs: ready %.2fs, done %.2fs, stopped %.2fs]",
		name, phase, sum(s.ends), r.ThroughputRPS, r.Elapsed, r.Syncs, r.CheckpointsMost, r.Commits, r.CPUs, r.PeakHeapMB,
		latencyText(r), noteText(r.Note),
		time.Since(wall).Seconds(), tReady.Seconds(), tDone.Seconds(), tStop.Seconds())
	return r, nil
}

// result is what run s of d measured: throughput, CPU (cpu in all,
// windowCPU from the first record), heap, the checkpoints and commits
// inside the measured window, timer overshoot and slot use.
func (d *design) result(s runSpec, cpu, windowCPU time.Duration, smp *sampler) *DesignResult {
	el := d.prog.elapsed()
	res := &DesignResult{
		Design:          string(s.kind),
		BatchSize:       s.batch,
		Elapsed:         el.Seconds(),
		CPUs:            cpu.Seconds(),
		PeakHeapMB:      float64(smp.peakLive) / (1 << 20),
		PeakHeapAllocMB: float64(smp.peakAlloc) / (1 << 20),
		GOMAXPROCS:      runtime.GOMAXPROCS(0),
		windowCPU:       windowCPU,
	}
	if el > 0 {
		res.ThroughputRPS = float64(d.prog.total()) / el.Seconds()
	}
	if d.ev != nil {
		res.Syncs, res.Commits, res.CheckpointsMost, _ = d.ev.window(d.prog.first.Load(), d.prog.last.Load(), len(s.ends))
	}
	if d.lim != nil {
		res.WaitOvershoot = d.lim.overshoot()
		if el > 0 && s.pt.workers > 0 {
			res.SlotUse = float64(d.lim.held.Load()) / (float64(s.pt.workers) * float64(el))
			res.SlotsIdle = float64(d.lim.idle.Load()) / float64(el)
		}
	}
	return res
}

// efficiency sets the run's fractions of the bounds of its input (with
// costs only): the pipelined bound, and its own design's (a chain's under
// its gate scope g).
func (res *DesignResult) efficiency(s runSpec, e *expectation, g chain.GateScope) {
	if e.bound.Time <= 0 || res.Elapsed <= 0 {
		return
	}
	frac := func(t time.Duration) *float64 {
		f := t.Seconds() / res.Elapsed
		return &f
	}
	res.Efficiency = frac(e.bound.Time)
	switch s.kind {
	case kindChain, kindPolling:
		res.EfficiencyOwn = frac(e.bound.orderTime(g))
	case kindStrongest:
		res.EfficiencyOwn = frac(e.stagedTime(s.batch, true))
	case kindDesign6:
		res.EfficiencyOwn = frac(e.stagedTime(s.batch, false))
	}
}

// judge reads the design's topics back, checks them against the model and
// sets res.Correctness; it fails with ErrIncorrect when they differ.
func (h *harness) judge(d *design, s runSpec, phase string, res *DesignResult) error {
	c, err := h.check(d, s.exp)
	if err != nil {
		return err
	}
	if s.paceRate > 0 && c.Missing+c.Duplicates+c.Unexpected+c.OrderViolations == 0 {
		// While input is fed live, a partition may pause longer than
		// IdleTimeout; both designs then release the gate (DESIGN.md "Attribution rules": idle
		// release trades completeness for progress), and an install may
		// miss a click that arrives after the pause. Such differences in
		// content are reported, not failed; loss, duplication and order are
		// checked as everywhere.
		c.OK = true
	}
	res.Correctness = &c
	if !c.OK {
		name := string(s.kind)
		if s.variant != nil && s.variant.name != "" {
			name += " (" + s.variant.name + ")"
		}
		if d.committed {
			name += ", read back read_committed"
		}
		return fmt.Errorf("%w: %s (%s, workload %s P=%d W=%d): missing %d, duplicated %d, mismatched %d, unexpected %d, out of order %d; first: %s",
			ErrIncorrect, name, phase, s.pt.name, s.pt.wc.Partitions, s.pt.workers,
			c.Missing, c.Duplicates, c.Mismatched, c.Unexpected, c.OrderViolations, c.First)
	}
	return nil
}

// latency sets the latencies of the measured outputs (and their floors)
// from the acknowledgement log and the feeder's send times.
func (h *harness) latency(s runSpec, acks []ack, f *feeder, res *DesignResult) {
	first, last := &s.exp.recs[s.warm], &s.exp.recs[s.warm+s.measured-1]
	from, to := f.sentAt[first.Partition][first.Offset].Load(), f.sentAt[last.Partition][last.Offset].Load()
	lat := latencies(acks, f, from, to)
	res.LatencyOutputs = len(lat)
	if len(lat) > 0 {
		p50, p99 := ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99))
		res.P50ms, res.P99ms = &p50, &p99
	}
	if pp := producePath(acks, f, from, to); len(pp) > 0 {
		p50, p99 := ms(quantile(pp, 0.5)), ms(quantile(pp, 0.99))
		res.ProduceP50ms, res.ProduceP99ms = &p50, &p99
	}
	if !s.kind.isChain() {
		return
	}
	rule := floorRule{scope: h.o.gateOf(s.variant), lateness: h.cfg.Lateness, idle: h.o.IdleTimeout}
	if fl := cascadeFloors(acks, f, from, to, s.exp, rule); len(fl) > 0 {
		p50, p99 := ms(quantile(fl, 0.5)), ms(quantile(fl, 0.99))
		res.RulesFloorP50ms, res.RulesFloorP99ms = &p50, &p99
		res.RulesFloorGate = string(rule.scope)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyText(r *DesignResult) string {
	if r.P50ms == nil {
		return ""
	}
	t := fmt.Sprintf("  p50 %.1fms p99 %.1fms", *r.P50ms, *r.P99ms)
	if r.ProduceP99ms != nil {
		t += fmt.Sprintf(" (produce path p50 %.1fms p99 %.1fms)", *r.ProduceP50ms, *r.ProduceP99ms)
	}
	if r.RulesFloorP99ms != nil {
		t += fmt.Sprintf(" (the rules' floor p50 %.1fms p99 %.1fms)", *r.RulesFloorP50ms, *r.RulesFloorP99ms)
	}
	return t
}

func noteText(n string) string {
	if n == "" {
		return ""
	}
	return "  (" + n + ")"
}

func (h *harness) check(d *design, exp *expectation) (Correctness, error) {
	if d.committed {
		// The last transaction's markers land after its commit returned: a
		// read_committed read at once could end before its outputs.
		for _, topic := range []string{d.out, d.dlq} {
			if err := h.c.WaitStable(topic, stableWait); err != nil {
				return Correctness{}, fmt.Errorf("bench: %w", err)
			}
		}
	}
	outs, err := h.c.ReadAll(d.out, d.committed)
	if err != nil {
		return Correctness{}, err
	}
	dlq, err := h.c.ReadAll(d.dlq, d.committed)
	if err != nil {
		return Correctness{}, err
	}
	return exp.verify(outs, dlq), nil
}

// stableWait bounds the wait for an exactly-once design's topics to have no
// open transaction before they are read back: well above the transaction
// timeout, after which the coordinator aborts a transaction left open.
const stableWait = time.Minute

// design is one design run, built by newDesign.
type design struct {
	prog     *progress
	ev       *events
	ready    chan struct{}
	run      func(ctx context.Context) error
	note     func() string
	out, dlq string
	acks     *ackLog
	lim      *limiter
	// committed: the outputs are read back read_committed (exactly-once).
	committed bool
	// txn times the commit path (the exactly-once cost table's runs).
	txn      *txnTimer
	closers  []func() error
	flushers []func() error
}

func (d *design) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		_ = d.closers[i]()
	}
	d.closers = nil
}

// flush closes the producer and store (every output acknowledged) before
// the outputs are read back.
func (d *design) flush() error {
	var errs []error
	for _, f := range d.flushers {
		errs = append(errs, f())
	}
	d.flushers = nil
	return errors.Join(errs...)
}

// readyAfter returns a function to call with the number of partitions a
// member claimed; ready closes once all n are claimed.
func (d *design) readyAfter(n int) func(int) {
	var claimed atomic.Int64
	var once sync.Once
	return func(k int) {
		if claimed.Add(int64(k)) >= int64(n) {
			once.Do(func() { close(d.ready) })
		}
	}
}

func (h *harness) newDesign(s runSpec) (*design, error) {
	o, c := h.o, h.c
	P, W := s.pt.wc.Partitions, s.pt.workers
	d := &design{prog: newProgress(s.ends), ev: &events{}, ready: make(chan struct{})}
	ready := d.readyAfter(P)
	group := c.name("group")
	base := c.Config()
	switch s.kind {
	case kindRaw:
		r := &rawConsumer{addrs: c.Addrs(), sarama: base, topic: s.topic, group: group, prog: d.prog, ready: ready}
		d.run = r.run
		return d, nil
	case kindNoop:
		ch, err := chain.New([]chain.Stage{{Name: "noop", Processor: noopProcessor}}, countingDecoder{cheapDecoder, d.prog},
			chain.WithObserver(chainObserver{d.prog, 0, d.ev}), chain.WithLogger(o.Logger), chain.WithBufferSize(o.BufferSize),
			chain.WithCommitInterval(o.CommitInterval))
		if err != nil {
			return nil, err
		}
		d.run = h.chainRun(ch, s.topic, group, func(int) { ready(1) })
		return d, nil
	}

	// The designs proper: outputs, dead letters, state, producer.
	var err error
	if d.out, err = c.createTopic("out", P); err != nil {
		return nil, err
	}
	if d.dlq, err = c.createTopic("dlq", 1); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() error { c.deleteTopics(d.out, d.dlq); return nil })
	st, closeStore, err := h.openStore()
	if err != nil {
		d.close()
		return nil, err
	}
	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: c.Addrs(), Sarama: base, Logger: o.Logger})
	if err != nil {
		closeStore()
		d.close()
		return nil, err
	}
	d.flushers = append(d.flushers, prod.Close, closeStore)
	d.closers = append(d.closers, func() error { return d.flush() })
	ap := &ackProducer{inner: prod}
	if s.paceRate > 0 {
		d.acks = &ackLog{}
		ap.log = d.acks
	}
	lim := newLimiter(W)
	d.lim = lim
	cfg := h.cfg
	if s.cfg != nil {
		cfg = *s.cfg // the velocity runs
	}
	// Both designs: every processor takes a slot of the W-slot limiter
	// around its simulated cost; every decoded record is counted.
	costs := func(stages []chain.Stage) []chain.Stage {
		for i := range stages {
			stages[i].Processor = withCost(stages[i].Processor, lim)
		}
		return stages
	}
	counting := func(dec chain.Decoder) chain.Decoder { return countingDecoder{dec, d.prog} }

	switch s.kind {
	case kindChain, kindPolling, kindVelocity:
		buf := o.BufferSize
		if s.kind == kindPolling {
			buf = o.PollingBufferSize
		}
		opts := []chain.Option{
			chain.WithStore(countingStore{st, d.ev}), chain.WithOutputTopic(d.out), chain.WithDLQTopic(d.dlq),
			chain.WithIdleTimeout(o.IdleTimeout), chain.WithBufferSize(buf), chain.WithCommitInterval(o.commitInterval(s.variant)),
			chain.WithObserver(chainObserver{d.prog, lastStage(cfg), d.ev}), chain.WithLogger(o.Logger),
		}
		// W as the micro-batch's pool of W workers, whose tasks never queue
		// at the limiter: the chain caps its workers at W too (its slots go
		// to the keys with the most records ready; see chain.WithWorkerCap).
		opts = append(opts, chain.WithWorkerCap(W))
		if o.asOfReads {
			opts = append(opts, chain.WithAsOfReads(true))
		}
		if s.variant != nil && s.variant.guarantee != "" {
			// The exactly-once cost table: a changelog, and the Transactor
			// for exactly-once.
			delivery, tt, err := h.costWiring(d, s, group)
			if err != nil {
				d.close()
				return nil, err
			}
			opts, d.txn, ap.t = append(opts, delivery...), tt, tt
		}
		if !d.committed {
			opts = append(opts, chain.WithProducer(ap))
		}
		if s.variant != nil {
			opts = append(opts, s.variant.options...)
		}
		ch, err := attribution.NewChainWith(cfg, attribution.Wiring{KeyConcurrency: o.chainKeyConcurrency(s.pt), Gate: o.gateOf(s.variant), Stages: costs, Decoder: counting}, opts...)
		if err != nil {
			d.close()
			return nil, err
		}
		d.run = h.chainRun(ch, s.topic, group, func(int) { ready(1) })
		d.note = func() string { return chainNote(ch.Stats()) }
	case kindDesign6, kindStrongest:
		// DESIGN.md "The micro-batch baseline": per-partition order, a
		// lingering poll, one checkpoint (one sync) per partition, the
		// commit synchronous on the consumer group's client. The strongest:
		// per-key order, no linger, one synced checkpoint batch for all
		// partitions, the commit in the background on a client of its own,
		// and the batch size the sweep chose.
		strong := s.kind == kindStrongest
		linger := o.BatchLinger
		if strong {
			linger = 0
		}
		ev := d.ev
		mb := microbatch.New(microbatch.Config{
			Brokers: c.Addrs(), Sarama: base, Topic: s.topic, Group: group,
			Stages: costs(attribution.Chain(h.cfg)), Decoder: counting(attribution.Decoder(h.cfg)), Store: st, Producer: ap, OutputTopic: d.out, DLQTopic: d.dlq,
			Lateness: h.cfg.Lateness, IdleTimeout: o.IdleTimeout, BatchSize: s.batch, BatchLinger: linger,
			WithoutAsOfReads: true, // as attribution.NewChainWith's chain
			Workers:          W, KeyOrder: strong, AsyncCommit: strong, GroupCheckpoint: strong,
			Checkpointed: func(parts []int32) { ev.synced(parts...) },
			Committed:    func(int) { ev.committed() },
			Progress:     d.prog.advance, Logger: o.Logger, Ready: ready,
			Retry: chain.RetryPolicy{MaxRetries: 5, Backoff: 10 * time.Millisecond, MaxBackoff: time.Second},
		})
		d.run = mb.Run
		d.note = func() string {
			return fmt.Sprintf("%d batches, %d idle releases", mb.Batches(), mb.IdleReleases())
		}
	default:
		d.close()
		return nil, fmt.Errorf("bench: unknown design %q", s.kind)
	}
	return d, nil
}

// lastStage is the index of the attribution chain's last stage, purchase
// (attribution.Chain: click, install, purchase; click, velocity, install,
// purchase with the velocity stage).
func lastStage(cfg attribution.Config) int {
	if cfg.Velocity.Enabled() {
		return 3
	}
	return 2
}

// chainRun binds ch to the topic with the kafka adapter.
func (h *harness) chainRun(ch *chain.Chain, topic, group string, assigned func(int)) func(context.Context) error {
	return func(ctx context.Context) error {
		return kafka.Run(ctx, ch, kafka.Config{
			Brokers: h.c.Addrs(), Topic: topic, Group: group, Start: kafka.StartEarliest,
			Sarama: h.c.Config(), Logger: h.o.Logger,
			Hooks: kafka.Hooks{Assigned: func(string, int32, int64) { assigned(1) }},
		})
	}
}

func chainNote(stats []chain.PartitionStats) string {
	var switches, idles, polling int64
	for _, p := range stats {
		for _, s := range p.Stages {
			switches += s.Switches
			idles += s.IdleReleases
			if s.Mode == "polling" {
				polling++
			}
		}
	}
	return fmt.Sprintf("%d mode switches, %d idle releases", switches, idles)
}

func (h *harness) openStore() (chain.Store, func() error, error) {
	if h.o.Store == "memory" {
		m := store.NewMemory()
		return m, m.Close, nil
	}
	dir, err := os.MkdirTemp(h.o.Dir, "differential-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: store dir: %w", err)
	}
	db, err := store.OpenPebble(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() error { return errors.Join(db.Close(), os.RemoveAll(dir)) }, nil
}

var noopProcessor = chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })

// cheapDecoder gives every record one type and its timestamp as event time,
// without parsing: the no-op chain measures the engine, not decoding.
var cheapDecoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	return chain.Decoded{Type: "x", Time: r.Timestamp}, nil
})

// median returns the run with the median throughput.
func median(rs []*DesignResult) *DesignResult {
	if len(rs) == 0 {
		return nil
	}
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *DesignResult) int {
		switch {
		case a.ThroughputRPS < b.ThroughputRPS:
			return -1
		case a.ThroughputRPS > b.ThroughputRPS:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// newPointRun starts point pt's stream, sized for 1.5× the chain's guessed
// throughput over Duration (or Options.Records); runs take its prefixes.
func (h *harness) newPointRun(pt point) *pointRun {
	n0 := h.o.sizeFor(1.5*chainGuess(pt), 0)
	if h.o.Records > 0 {
		n0 = h.o.Records
	}
	return &pointRun{h: h, pt: pt, st: newStream(pt.wc, n0)}
}
