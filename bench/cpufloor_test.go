package bench

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/processors/attribution"
)

// floorEnv is an embedded broker with one produced input of workload B.
func floorEnv(t *testing.T, o Options, records int) (*harness, *pointRun, *input) {
	t.Helper()
	o = o.withDefaults()
	c, err := openBroker(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	pt := point{name: "B", wc: baseWorkload(1, 4, 0), workers: 16, floor: true}
	pr := &pointRun{h: h, pt: pt, st: newStream(pt.wc, records)}
	t.Cleanup(pr.close)
	in, err := pr.input(records)
	require.NoError(t, err)
	return h, pr, in
}

// The floor measured on the embedded broker: every part costs CPU, the
// floor is their sum and the bound is GOMAXPROCS ÷ the floor; the process
// pass emits exactly the reference model's outputs and dead letters.
func TestCPUFloorPartsSumToFloor(t *testing.T) {
	h, pr, in := floorEnv(t, Options{Quick: true}, 4000)
	f, err := h.cpuFloor(context.Background(), pr.pt, in, 2)
	require.NoError(t, err)
	require.Equal(t, 2, f.Passes)
	require.Equal(t, in.n, f.Records)
	for name, us := range map[string]float64{"consume": f.ConsumeUs, "decode": f.DecodeUs, "process": f.ProcessUs, "produce": f.ProduceUs} {
		require.Positive(t, us, name)
	}
	require.InDelta(t, f.ConsumeUs+f.DecodeUs+f.ProcessUs+f.ProduceUs, f.FloorUs, 1e-9)
	require.Equal(t, runtime.GOMAXPROCS(0), f.Cores)
	require.True(t, f.EmbeddedBroker)
	require.InDelta(t, float64(f.Cores)/(f.FloorUs*1e-6), f.BoundRPS, 1e-6*f.BoundRPS)
	e := pr.expect(in)
	require.Equal(t, len(e.outputs), f.Outputs, "one output per install and purchase of the model")
	require.Equal(t, len(e.invalid), f.DeadLetters)
}

// The process pass's outputs and dead letters, produced and read back,
// are the reference model's: the pass does the engine's work, not less.
func TestCPUFloorProcessPassIsCorrect(t *testing.T) {
	h, pr, in := floorEnv(t, Options{Quick: true}, 4000)
	ctx := context.Background()
	evs := decodeAll(attribution.Decoder(h.cfg), in)
	out, err := processAll(ctx, h.cfg, in.topic, h.o.IdleTimeout, evs)
	require.NoError(t, err)
	outTopic, err := h.c.createTopic("floor-out", pr.pt.wc.Partitions)
	require.NoError(t, err)
	dlqTopic, err := h.c.createTopic("floor-dlq", 1)
	require.NoError(t, err)
	defer h.c.deleteTopics(outTopic, dlqTopic)
	cpu, err := h.produceAll(ctx, out, outTopic, dlqTopic)
	require.NoError(t, err)
	require.Positive(t, cpu)
	outs, err := h.c.ReadAll(outTopic, false)
	require.NoError(t, err)
	dlq, err := h.c.ReadAll(dlqTopic, false)
	require.NoError(t, err)
	c := pr.expect(in).verify(outs, dlq)
	require.True(t, c.OK, "%+v", c)
	require.Positive(t, c.Outputs)
	require.Positive(t, c.DeadLetters)
}

// Each part is the median of its passes; the floor sums the medians; the
// bound is cores ÷ floor; the designs' fractions are of that bound.
func TestCPUFloorMedianBoundAndFractions(t *testing.T) {
	us := time.Microsecond
	passes := []floorParts{
		{consume: 3 * us, decode: 2 * us, process: 10 * us, produce: 4 * us, outputs: 7, deadLetters: 1},
		{consume: 1 * us, decode: 9 * us, process: 12 * us, produce: 2 * us, outputs: 7, deadLetters: 1},
		{consume: 2 * us, decode: 1 * us, process: 11 * us, produce: 3 * us, outputs: 7, deadLetters: 1},
	}
	f := newCPUFloor(1000, 4, passes)
	require.Equal(t, 2.0, f.ConsumeUs)
	require.Equal(t, 2.0, f.DecodeUs)
	require.Equal(t, 11.0, f.ProcessUs)
	require.Equal(t, 3.0, f.ProduceUs)
	require.Equal(t, 18.0, f.FloorUs)
	require.InDelta(t, 4/18e-6, f.BoundRPS, 1e-6)
	require.Equal(t, 7, f.Outputs)

	// 36 µs of CPU per record: twice the floor.
	chainRun := &DesignResult{Design: string(kindChain), ThroughputRPS: f.BoundRPS / 2, Records: 1000, CPUs: 0.036}
	strong := &DesignResult{Design: string(kindStrongest), ThroughputRPS: f.BoundRPS / 4}
	require.InDelta(t, 0.25, *f.fraction(strong), 1e-12)
	require.Nil(t, f.fraction(nil))
	require.InDelta(t, 0.5, *f.share(chainRun), 1e-9)
	require.Nil(t, f.share(strong), "no CPU measured")
	require.InDelta(t, 0.5, *f.fraction(chainRun), 1e-12)
	require.Nil(t, f.fraction(&DesignResult{Design: string(kindRaw), ThroughputRPS: 1}), "the raw consumer does not do the floor's work")

	var b strings.Builder
	f.write(&b, chainRun, strong, nil)
	require.Contains(t, b.String(), "18.00 µs")
	require.Contains(t, b.String(), "chain at 0.50 of it (floor ÷ its cpu per record 0.50)")
}

// withProcs sets GOMAXPROCS for f and restores it, also when f fails or
// panics.
func TestWithProcsSetsAndRestores(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	want := 1
	if prev == 1 {
		want = 2
	}
	var inside int
	require.NoError(t, withProcs(want, func() error { inside = runtime.GOMAXPROCS(0); return nil }))
	require.Equal(t, want, inside)
	require.Equal(t, prev, runtime.GOMAXPROCS(0))

	boom := errors.New("boom")
	require.ErrorIs(t, withProcs(want, func() error { return boom }), boom)
	require.Equal(t, prev, runtime.GOMAXPROCS(0))

	require.Panics(t, func() { _ = withProcs(want, func() error { panic("boom") }) })
	require.Equal(t, prev, runtime.GOMAXPROCS(0))
}

// Speed-ups are against the sweep's fewest cores; fractions of the bound
// scale the bound with each point's cores.
func TestFinishCores(t *testing.T) {
	d := func(k kind, rps float64) *DesignResult { return &DesignResult{Design: string(k), ThroughputRPS: rps} }
	pts := []CoresPoint{
		{Cores: 2, Chain: d(kindChain, 300), Strongest: d(kindStrongest, 150)},
		{Cores: 1, Chain: d(kindChain, 200), Strongest: d(kindStrongest, 100)},
	}
	finishCores(pts, &CPUFloor{FloorUs: 2000}) // 500 rec/s per core
	require.InDelta(t, 1.5, *pts[0].ChainSpeedup, 1e-12)
	require.InDelta(t, 1.5, *pts[0].StrongestSpeedup, 1e-12)
	require.InDelta(t, 1.0, *pts[1].ChainSpeedup, 1e-12)
	require.InDelta(t, 0.3, *pts[0].ChainOfBound, 1e-12)
	require.InDelta(t, 0.4, *pts[1].ChainOfBound, 1e-12)
	require.InDelta(t, 0.15, *pts[0].StrongestOfBound, 1e-12)
}

// --floor-only with a cores sweep, end to end on the embedded broker:
// the floor and the sweep's rows are reported, each run at its
// GOMAXPROCS, checked correct, and GOMAXPROCS is restored after.
func TestFloorOnlyCoresSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the designs at each core count")
	}
	prev := runtime.GOMAXPROCS(0)
	cores := []int{1}
	if runtime.NumCPU() > 1 {
		cores = append(cores, 2)
	}
	rep, err := Run(context.Background(), Options{FloorOnly: true, Quick: true, Records: 6000, Cores: cores, SweepBatchSizes: []int{500}, NoLatency: true})
	require.NoError(t, err)
	require.Equal(t, prev, runtime.GOMAXPROCS(0), "restored after the sweep")
	require.Len(t, rep.Workloads, 1)
	w := rep.Workloads[0]
	require.Equal(t, "B", w.Workload)
	require.Nil(t, w.Chain, "no design comparison")
	require.NotNil(t, w.Floor)
	require.Positive(t, w.Floor.FloorUs)
	require.Len(t, w.Cores, len(cores))
	for i, p := range w.Cores {
		require.Equal(t, cores[i], p.Cores)
		for _, d := range []*DesignResult{p.Chain, p.Strongest} {
			require.NotNil(t, d)
			require.Equal(t, cores[i], d.GOMAXPROCS, "%s at %d cores", d.Design, p.Cores)
			require.True(t, d.Correctness.OK, "%s at %d cores: %+v", d.Design, p.Cores, d.Correctness)
			require.Positive(t, cpuPerRecordUs(d))
		}
		require.NotNil(t, p.ChainSpeedup)
		require.NotNil(t, p.ChainOfBound)
	}
	require.Equal(t, 500, w.Cores[0].Strongest.BatchSize)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	for _, s := range []string{"CPU floor", "CPU bound", "cores sweep", "speed-up"} {
		require.Contains(t, table.String(), s)
	}
}

// The options: FloorOnly is B's alone; Cores is within the machine's
// CPUs, B's, and not for the cost table.
func TestFloorOptionsValidate(t *testing.T) {
	o := Options{FloorOnly: true}.withDefaults()
	require.Equal(t, []string{"B"}, o.Workloads)
	require.NoError(t, o.validate())
	for _, bad := range []Options{
		{FloorOnly: true, Workloads: []string{"A"}},
		{Cores: []int{0}},
		{Cores: []int{runtime.NumCPU() + 1}},
		{Cores: []int{1, 1}},
		{Cores: []int{1}, Workloads: []string{"A"}},
		{Cores: []int{1}, EOSCost: true},
	} {
		require.Error(t, bad.withDefaults().validate(), "%+v", bad)
	}
}
