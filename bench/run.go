package bench

import (
	"context"
	"errors"
	"fmt"
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
// returns the report. It writes the JSON and SVG files when their paths are
// set. It fails — with the report so far — when a design loses or
// duplicates a record's output (ErrIncorrect), stalls past Timeout, or
// errors.
func Run(ctx context.Context, opts Options) (Report, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	c, err := openBroker(o.Brokers)
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = c.Close() }()
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	rep := Report{
		Started: time.Now().UTC(), Broker: "embedded kfake (in-process)", GoVersion: runtime.Version(),
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Quick: o.Quick, Store: o.Store,
		BatchSize: o.BatchSize, BatchLinger: o.BatchLinger.String(), BufferSize: o.BufferSize,
		PollingBufferSize: o.PollingBufferSize, IdleTimeout: o.IdleTimeout.String(),
		LatencyLoad: o.LatencyLoad, Repeats: o.Repeats,
	}
	if len(o.Brokers) > 0 {
		rep.Broker = fmt.Sprint(o.Brokers)
	}
	for _, pt := range o.points() {
		wr, err := h.runPoint(ctx, pt)
		if wr != nil {
			rep.Workloads = append(rep.Workloads, *wr)
		}
		if err != nil {
			rep.Targets = targets(rep.Workloads)
			return rep, err
		}
	}
	rep.Targets = targets(rep.Workloads)
	if err := rep.write(o.JSONPath, o.SVGPath); err != nil {
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

// runPoint measures one configuration: the throughput phase (each design
// over the same pre-produced input, alternating), the ceilings when asked,
// then the latency phase.
func (h *harness) runPoint(ctx context.Context, pt point) (*WorkloadResult, error) {
	P := pt.wc.Partitions
	gen := time.Now()
	recs := workload.Generate(pt.wc)
	exp := newExpectation(recs, P, pt.workers, h.cfg, h.o.IdleTimeout)
	wr := &WorkloadResult{
		Workload: pt.name, Records: len(recs), Partitions: P, Workers: pt.workers,
		Params: pt.wc.String(), Bound: exp.bound, BoundTimeS: exp.bound.Time.Seconds(),
	}
	h.progressf("workload %s P=%d W=%d: %s (generated and modelled in %v)", pt.name, P, pt.workers, pt.wc, time.Since(gen).Round(time.Millisecond))
	input, err := h.c.createTopic("in", P)
	if err != nil {
		return nil, err
	}
	defer h.c.deleteTopics(input)
	if err := h.c.produceAll(input, recs, P); err != nil {
		return nil, err
	}

	kinds := []kind{kindChain, kindMicroBatch}
	if pt.gates {
		kinds = []kind{kindChain, kindChainOtherGate, kindMicroBatch}
	}
	if pt.keyOrder {
		kinds = append(kinds, kindMicroBatchKey)
	}
	runs := map[kind][]*DesignResult{}
	vel, velResult := h.velocitySpec(pt, input, recs)
	for range h.o.Repeats {
		for _, k := range kinds {
			r, err := h.measure(ctx, runSpec{kind: k, pt: pt, topic: input, exp: exp})
			if err != nil {
				return wr, err
			}
			runs[k] = append(runs[k], r)
		}
		if vel != nil {
			r, err := h.measure(ctx, *vel)
			if err != nil {
				return wr, err
			}
			runs[kindVelocity] = append(runs[kindVelocity], r)
		}
	}
	wr.Chain, wr.MicroBatch = median(runs[kindChain]), median(runs[kindMicroBatch])
	wr.MicroBatchKey = median(runs[kindMicroBatchKey])
	wr.Gate = string(h.o.Gate)
	if pt.gates {
		wr.ChainOtherGate, wr.OtherGate = median(runs[kindChainOtherGate]), string(h.o.otherGate())
	}
	if velResult != nil {
		velResult.Chain = median(runs[kindVelocity])
		velResult.finish(wr.Chain, len(recs))
		wr.Velocity = velResult
	}
	if pt.ceiling {
		if err := h.ceilings(ctx, pt, wr); err != nil {
			return wr, err
		}
		wr.PollingChain, err = h.measure(ctx, runSpec{kind: kindPolling, pt: pt, topic: input, exp: exp})
		if err != nil {
			return wr, err
		}
	}
	if !h.o.NoLatency {
		if err := h.latencyPhase(ctx, pt, recs, wr, kinds); err != nil {
			return wr, err
		}
	}
	wr.ratios()
	return wr, nil
}

// ceilings measures the raw consumer and the one-stage no-op chain on a
// larger input of the point's shape (both read it at hundreds of thousands
// of records per second, so the point's own input would last milliseconds),
// three times each, alternating; the median run is reported.
func (h *harness) ceilings(ctx context.Context, pt point, wr *WorkloadResult) error {
	wc := pt.wc
	wc.Records = ceilingRecords
	if h.o.Quick {
		wc.Records = ceilingRecords / 10
	}
	recs := workload.Generate(wc)
	exp := &expectation{recs: recs, ends: make([]int64, wc.Partitions)}
	for i := range recs {
		exp.ends[recs[i].Partition]++
	}
	topic, err := h.c.createTopic("ceil", wc.Partitions)
	if err != nil {
		return err
	}
	defer h.c.deleteTopics(topic)
	if err := h.c.produceAll(topic, recs, wc.Partitions); err != nil {
		return err
	}
	wr.CeilingRecords = len(recs)
	runs := map[kind][]*DesignResult{}
	for range 3 {
		for _, k := range []kind{kindRaw, kindNoop} {
			r, err := h.measure(ctx, runSpec{kind: k, pt: pt, topic: topic, exp: exp})
			if err != nil {
				return err
			}
			runs[k] = append(runs[k], r)
		}
	}
	wr.Raw, wr.NoopChain = median(runs[kindRaw]), median(runs[kindNoop])
	return nil
}

// ceilingRecords is the input size of the ceiling measurement.
const ceilingRecords = 300_000

// latencyPhase feeds the input to a fresh, empty topic per design: its first
// fifth at once (consumed as a backlog, not measured: the log's start holds
// few outputs, clicks of journeys whose installs come later), then, open
// loop, the following records at LatencyLoad × the slower design's
// throughput; it measures the latency of the outputs of those records.
func (h *harness) latencyPhase(ctx context.Context, pt point, recs []workload.Record, wr *WorkloadResult, kinds []kind) error {
	rate := h.o.LatencyLoad * min(wr.Chain.ThroughputRPS, wr.MicroBatch.ThroughputRPS)
	// Records are fed for LatencyDuration plus a tail that is not measured:
	// the last records of a log wait for the idle release (no later event
	// time arrives), which a continuous stream never does.
	d := h.o.LatencyDuration.Seconds()
	if pt.latencyScale > 0 {
		d *= pt.latencyScale
	}
	tail := min(latencyTail.Seconds(), d/2)
	warm := len(recs) / 5
	n := min(len(recs)-warm, max(int(rate*(d+tail)), 2))
	measured := max(int(float64(n)*d/(d+tail)), 1)
	wr.LatencyRate, wr.LatencyRecords = rate, measured
	exp := newExpectation(recs[:warm+n], pt.wc.Partitions, pt.workers, h.cfg, h.o.IdleTimeout)
	for _, k := range kinds {
		topic, err := h.c.createTopic("lat", pt.wc.Partitions)
		if err != nil {
			return err
		}
		r, err := h.measure(ctx, runSpec{kind: k, pt: pt, topic: topic, exp: exp, paceRate: rate, warm: warm, measured: measured})
		h.c.deleteTopics(topic)
		if err != nil {
			return err
		}
		d := wr.design(k)
		d.P50ms, d.P99ms = r.P50ms, r.P99ms
		d.LatencyOutputs = r.LatencyOutputs
		d.latencies = r.latencies
		d.LatencyCorrectness = r.Correctness
		d.FloorP50ms, d.FloorP99ms = r.FloorP50ms, r.FloorP99ms
	}
	return nil
}

// kind is a measured consumer.
type kind string

const (
	kindChain         kind = "chain"
	kindMicroBatch    kind = "microbatch"
	kindMicroBatchKey kind = "microbatch_key"
	kindRaw           kind = "raw"
	kindNoop          kind = "noop_chain"
	kindPolling       kind = "polling_chain"
)

// runSpec is one design run.
type runSpec struct {
	kind  kind
	pt    point
	topic string
	exp   *expectation
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
// latencies.
func (h *harness) measure(ctx context.Context, s runSpec) (*DesignResult, error) {
	wall := time.Now()
	d, err := h.newDesign(s)
	if err != nil {
		return nil, err
	}
	defer d.close()
	run := h.start(ctx, s, d, wall)
	defer run.abort()
	if err := run.awaitReady(); err != nil {
		return nil, err
	}
	if s.paceRate > 0 {
		h.feed(run)
	}
	if err := run.awaitDone(); err != nil {
		return nil, err
	}
	if err := run.finish(); err != nil {
		return nil, err
	}
	r := run.result()
	if d.out != "" {
		if err := h.judge(run, r); err != nil {
			return r, err
		}
	}
	if s.paceRate > 0 && d.acks != nil {
		h.latency(run, r)
	}
	h.progressf("  %-14s %-26s %8.0f rec/s  %6.2fs  cpu %5.1fs  heap %6.1f MB%s%s  [wall %.1fs: ready %.2fs, done %.2fs, stopped %.2fs]",
		s.kind, run.phase, r.ThroughputRPS, r.Elapsed, r.CPUs, r.PeakHeapMB, latencyText(r), noteText(r.Note),
		time.Since(run.wall).Seconds(), run.tReady.Seconds(), run.tDone.Seconds(), run.tStop.Seconds())
	return r, nil
}

// running is one design run in progress: the design's run goroutine, the
// sampler of its completion curve and heap, and in the latency phase the
// feeder. Only measure's goroutine uses it.
type running struct {
	d     *design
	s     runSpec
	phase string
	wall  time.Time // when measure began (before the design was built)
	// tReady, tDone, tStop: since wall, when every partition was assigned,
	// every record complete, the design stopped and flushed.
	tReady, tDone, tStop time.Duration
	cpu0, cpu            time.Duration // process CPU at the start; used until done
	smp                  *sampler
	note                 string
	limit                time.Duration   // Options.Timeout: bounds the whole run
	timeout              *time.Timer     // fires after limit
	gate                 chain.GateScope // a chain design's gate scope

	ctx     context.Context    // of the run and the feeder
	cancel  context.CancelFunc // cancels ctx
	errc    chan error         // the run's result
	stopped bool               // errc was read

	fed chan error // the feeder's result (nil: none, or read)
	f   *feeder    // the feeder, once fed delivered
}

// start starts the design's run and the sampler.
func (h *harness) start(ctx context.Context, s runSpec, d *design, wall time.Time) *running {
	phase := "throughput"
	if s.paceRate > 0 {
		phase = fmt.Sprintf("latency @ %.0f rec/s", s.paceRate)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &running{d: d, s: s, phase: phase, wall: wall, ctx: runCtx, cancel: cancel, errc: make(chan error, 1),
		limit: h.o.Timeout, timeout: time.NewTimer(h.o.Timeout), gate: h.o.gateOf(s.kind)}
	r.cpu0 = cpuTime()
	r.smp = startSampler(d.prog)
	go func() { r.errc <- d.run(runCtx) }()
	return r
}

// stop cancels the run and returns its error (once; nil after).
func (r *running) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	return <-r.errc
}

// ended notes that the run returned err before being stopped.
func (r *running) ended(err error) error {
	r.stopped = true
	return err
}

// abort stops whatever still runs, the feeder first (it waits for the
// design's progress), and releases the timer and the sampler.
func (r *running) abort() {
	if r.fed != nil {
		r.cancel()
		<-r.fed
		r.fed = nil
	}
	_ = r.stop()
	r.smp.finish()
	r.timeout.Stop()
}

// awaitReady waits until every partition is assigned.
func (r *running) awaitReady() error {
	select {
	case <-r.d.ready:
	case err := <-r.errc:
		return fmt.Errorf("bench: %s (%s) stopped before consuming: %w", r.s.kind, r.phase, r.ended(err))
	case <-r.timeout.C:
		return fmt.Errorf("bench: %s (%s): no partition assigned after %v", r.s.kind, r.phase, r.limit)
	}
	r.tReady = time.Since(r.wall)
	return nil
}

// feed starts the latency phase's feeder: the warm-up records at once, then
// the rest at the paced rate once the design completed the warm-up.
func (h *harness) feed(r *running) {
	s := r.s
	r.fed = make(chan error, 1)
	go func() {
		// r.f is read only after fed delivers.
		f, err := h.c.pace(r.ctx, s.topic, s.exp.recs, s.pt.wc.Partitions, s.paceRate, s.warm, func(ctx context.Context) error {
			return r.d.prog.reached(ctx, int64(s.warm))
		})
		r.f = f
		r.fed <- err
	}()
}

// awaitDone waits until every record is complete.
func (r *running) awaitDone() error {
	select {
	case <-r.d.prog.done:
	case err := <-r.errc:
		if err == nil {
			err = errors.New("stopped early")
		}
		return fmt.Errorf("bench: %s (%s): %w", r.s.kind, r.phase, r.ended(err))
	case <-r.timeout.C:
		return fmt.Errorf("bench: %s (%s) stalled: %d of %d records complete after %v",
			r.s.kind, r.phase, r.d.prog.completed(), r.d.prog.total(), r.limit)
	}
	r.cpu = cpuTime() - r.cpu0
	r.tDone = time.Since(r.wall)
	r.smp.finish()
	if r.d.note != nil {
		r.note = r.d.note()
	}
	return nil
}

// finish waits for the feeder (every record was consumed, so every one was
// sent), stops the design and flushes its producer and store, so its
// outputs can be read back.
func (r *running) finish() error {
	if r.fed != nil {
		err := <-r.fed
		r.fed = nil
		if err != nil {
			return err
		}
	}
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: %s (%s) failed when stopping: %w", r.s.kind, r.phase, err)
	}
	if err := r.d.flush(); err != nil {
		return err
	}
	r.tStop = time.Since(r.wall)
	return nil
}

// result is what the run measured: throughput, CPU, heap, efficiency
// against the bounds, timer overshoot and the completion curve.
func (r *running) result() *DesignResult {
	d, b := r.d, r.s.exp.bound
	el := d.prog.elapsed()
	res := &DesignResult{
		Elapsed:         el.Seconds(),
		CPUs:            r.cpu.Seconds(),
		PeakHeapMB:      float64(r.smp.peakLive) / (1 << 20),
		PeakHeapAllocMB: float64(r.smp.peakAlloc) / (1 << 20),
		Note:            r.note,
	}
	if el > 0 {
		res.ThroughputRPS = float64(d.prog.total()) / el.Seconds()
	}
	if b.Time > 0 && el > 0 {
		eff := b.Time.Seconds() / el.Seconds()
		res.Efficiency = &eff
		co := b.ChainOrderTime.Seconds() / el.Seconds()
		switch r.s.kind {
		case kindChain, kindChainOtherGate, kindPolling, kindVelocity:
			// Against the bound of the chain's own gate scope.
			co = b.orderTime(r.gate) / el.Seconds()
		}
		res.EfficiencyChainOrder = &co
	}
	if d.lim != nil {
		res.WaitOvershoot = d.lim.overshoot()
	}
	first := d.prog.first.Load()
	for _, sm := range r.smp.samples {
		if sm.at >= first {
			res.series = append(res.series, seriesPoint{t: time.Duration(sm.at - first).Seconds(), done: sm.done})
		}
	}
	return res
}

// judge reads the design's topics back, checks them against the model and
// sets res.Correctness; it fails with ErrIncorrect when they differ.
func (h *harness) judge(r *running, res *DesignResult) error {
	s := r.s
	c, err := h.check(r.d, s.exp)
	if err != nil {
		return err
	}
	if s.paceRate > 0 && c.Missing+c.Duplicates+c.Unexpected+c.OrderViolations == 0 {
		// While input is fed live, a partition may pause longer than
		// IdleTimeout; both designs then release the gate (DESIGN §5: idle
		// release trades completeness for progress), and an install may
		// miss a click that arrives after the pause. Such differences in
		// content are reported, not failed; loss, duplication and order are
		// checked as everywhere.
		c.OK = true
	}
	res.Correctness = &c
	if !c.OK {
		return fmt.Errorf("%w: %s (%s, workload %s P=%d W=%d): missing %d, duplicated %d, mismatched %d, unexpected %d, out of order %d; first: %s",
			ErrIncorrect, s.kind, r.phase, s.pt.name, s.pt.wc.Partitions, s.pt.workers,
			c.Missing, c.Duplicates, c.Mismatched, c.Unexpected, c.OrderViolations, c.First)
	}
	return nil
}

// latency sets the latencies of the measured outputs (and their floors)
// from the acknowledgement log and the feeder's send times.
func (h *harness) latency(r *running, res *DesignResult) {
	s, f := r.s, r.f
	first, last := &s.exp.recs[s.warm], &s.exp.recs[s.warm+s.measured-1]
	from, to := f.sentAt[first.Partition][first.Offset].Load(), f.sentAt[last.Partition][last.Offset].Load()
	acks := r.d.acks.acks
	lat := latencies(acks, f, from, to)
	res.latencies = lat
	res.LatencyOutputs = len(lat)
	if len(lat) > 0 {
		p50, p99 := ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99))
		res.P50ms, res.P99ms = &p50, &p99
	}
	if fl := latencyFloors(acks, f, from, to, s.exp, h.o.IdleTimeout); len(fl) > 0 {
		p50, p99 := ms(quantile(fl, 0.5)), ms(quantile(fl, 0.99))
		res.FloorP50ms, res.FloorP99ms = &p50, &p99
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyText(r *DesignResult) string {
	if r.P50ms == nil {
		return ""
	}
	return fmt.Sprintf("  p50 %.1fms p99 %.1fms", *r.P50ms, *r.P99ms)
}

func noteText(n string) string {
	if n == "" {
		return ""
	}
	return "  (" + n + ")"
}

func (h *harness) check(d *design, exp *expectation) (Correctness, error) {
	outs, err := h.c.ReadAll(d.out, false)
	if err != nil {
		return Correctness{}, err
	}
	dlq, err := h.c.ReadAll(d.dlq, false)
	if err != nil {
		return Correctness{}, err
	}
	return exp.verify(outs, dlq), nil
}

// design is one design run, built by newDesign.
type design struct {
	prog     *progress
	ready    chan struct{}
	run      func(ctx context.Context) error
	note     func() string
	out, dlq string
	acks     *ackLog
	lim      *limiter
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
	d := &design{prog: newProgress(s.exp.ends), ready: make(chan struct{})}
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
			chain.WithObserver(chainObserver{d.prog, 0}), chain.WithLogger(o.Logger), chain.WithBufferSize(o.BufferSize))
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
	case kindChain, kindChainOtherGate, kindPolling, kindVelocity:
		buf := o.BufferSize
		if s.kind == kindPolling {
			buf = o.PollingBufferSize
		}
		ch, err := attribution.NewChainWith(cfg, attribution.Wiring{KeyConcurrency: W, Gate: o.gateOf(s.kind), Stages: costs, Decoder: counting},
			chain.WithStore(st), chain.WithProducer(ap), chain.WithOutputTopic(d.out), chain.WithDLQTopic(d.dlq),
			chain.WithIdleTimeout(o.IdleTimeout), chain.WithBufferSize(buf),
			chain.WithObserver(chainObserver{d.prog, lastStage(cfg)}), chain.WithLogger(o.Logger))
		if err != nil {
			d.close()
			return nil, err
		}
		d.run = h.chainRun(ch, s.topic, group, func(int) { ready(1) })
		d.note = func() string { return chainNote(ch.Stats()) }
	case kindMicroBatch, kindMicroBatchKey:
		mb := microbatch.New(microbatch.Config{
			Brokers: c.Addrs(), Sarama: base, Topic: s.topic, Group: group,
			Stages: costs(attribution.Chain(h.cfg)), Decoder: counting(attribution.Decoder(h.cfg)), Store: st, Producer: ap, OutputTopic: d.out, DLQTopic: d.dlq,
			Lateness: h.cfg.Lateness, IdleTimeout: o.IdleTimeout, BatchSize: o.BatchSize, BatchLinger: o.BatchLinger,
			Workers: W, KeyOrder: s.kind == kindMicroBatchKey, Progress: d.prog.advance, Logger: o.Logger, Ready: ready,
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
