package attribution_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// schedule is how the simulated engine interleaves the stages.
type schedule int

const (
	// eager: followers begin a record as soon as the gate allows (the
	// deepest stage that can act acts first): the smallest lag.
	eager schedule = iota
	// stagewise: the click stage completes the partition, then the install
	// stage, then the purchase stage (each released by its idle leader).
	stagewise
	// random: random interleaving of Sequence and Process steps with random
	// stage speeds, up to 8 records in flight per stage processed in any
	// order that keeps each key's order (key-parallel), random eviction.
	random
)

func (s schedule) String() string { return [...]string{"eager", "stagewise", "random"}[s] }

// sim runs the attribution chain over one partition the way the engine
// does (DESIGN.md "Mechanisms", "Attribution rules"): decode once, S(o) over valid records, Sequence in
// offset order, Process (possibly out of order across keys), the follower
// gate next(leader) > o and wm(leader) > t + Lateness (released when the
// leader completed the whole log: idle), eviction of expired entries at
// the last stage's watermark, EvictionWatermark = the last stage's
// watermark.
type sim struct {
	t       testing.TB
	cfg     attribution.Config
	recs    []chain.Record
	evs     []chain.Event
	s       []time.Time // s[i] = S before record i; s[n] = final stream time
	stages  []chain.Stage
	st      []*stageSim
	store   *memState
	rng     *rand.Rand
	sched   schedule
	invalid []int64
	out     [][]emitted // per stage, in emission order
}

type stageSim struct {
	seqNext int
	next    int // first incomplete index
	done    []bool
	pending []int // sequenced, not processed, in offset order
}

type emitted struct {
	off int64
	msg chain.Message
}

func newSim(t testing.TB, recs []chain.Record, cfg attribution.Config, sched schedule, seed uint64) *sim {
	recs = append([]chain.Record(nil), recs...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
	m := &sim{t: t, cfg: cfg, recs: recs, stages: attribution.Chain(cfg), store: newMemState(),
		rng: rand.New(rand.NewPCG(seed, 99)), sched: sched}
	dec := attribution.Decoder(cfg)
	n := len(recs)
	m.evs = make([]chain.Event, n)
	m.s = make([]time.Time, n+1)
	var stream time.Time
	for i := range recs {
		d, err := dec.Decode(&recs[i])
		m.evs[i] = chain.Event{Record: recs[i], Decoded: d, Err: err}
		m.s[i] = stream
		if err == nil && d.Time.After(stream) {
			stream = d.Time
		}
	}
	m.s[n] = stream
	for range m.stages {
		m.st = append(m.st, &stageSim{done: make([]bool, n)})
	}
	m.out = make([][]emitted, len(m.stages))
	return m
}

func (m *sim) evictWM() time.Time { return m.s[m.st[len(m.st)-1].next] }

func (m *sim) ctx(k, i int) *chain.Context {
	return chain.NewContext(chain.ContextOptions{Topic: m.recs[i].Topic, Partition: m.recs[i].Partition,
		Stage: m.stages[k].Name, Offset: m.recs[i].Offset, StreamTime: m.s[i], EvictionWatermark: m.evictWM(), State: m.store})
}

func (m *sim) accepts(k int, ev *chain.Event) bool { return ev.Err == nil && m.stages[k].Filter(ev) }

// gate reports whether stage k may begin record i.
func (m *sim) gate(k, i int) bool {
	if k == 0 {
		return true
	}
	l := m.st[k-1]
	if l.next == len(m.recs) {
		return true // idle leader
	}
	if l.next <= i {
		return false
	}
	ev := &m.evs[i]
	return !m.accepts(k, ev) || m.s[l.next].After(ev.Time.Add(m.cfg.Lateness))
}

func (m *sim) complete(k, i int) {
	st := m.st[k]
	st.done[i] = true
	for st.next < len(m.recs) && st.done[st.next] {
		st.next++
	}
}

func (m *sim) canSequence(k, maxPending int) bool {
	st := m.st[k]
	return st.seqNext < len(m.recs) && len(st.pending) < maxPending && m.gate(k, st.seqNext)
}

func (m *sim) sequence(k int) {
	st := m.st[k]
	i := st.seqNext
	st.seqNext++
	ev := &m.evs[i]
	if ev.Err != nil {
		if k == 0 {
			m.invalid = append(m.invalid, ev.Offset)
		}
		m.complete(k, i)
		return
	}
	if !m.accepts(k, ev) {
		m.complete(k, i)
		return
	}
	pc := m.ctx(k, i)
	skip, err := m.stages[k].Processor.(chain.Sequencer).Sequence(pc, ev)
	require.NoError(m.t, err)
	require.Empty(m.t, pc.Emitted())
	if skip {
		m.complete(k, i)
		return
	}
	st.pending = append(st.pending, i)
}

// process runs the pending record at index j of stage k's pending list; it
// must be the first pending record of its key.
func (m *sim) process(k, j int) {
	st := m.st[k]
	i := st.pending[j]
	st.pending = append(st.pending[:j], st.pending[j+1:]...)
	pc := m.ctx(k, i)
	ev := m.evs[i] // the engine hands processors a copy
	require.NoError(m.t, m.stages[k].Processor.Process(context.Background(), pc, &ev))
	for _, msg := range pc.Emitted() {
		m.out[k] = append(m.out[k], emitted{off: m.recs[i].Offset, msg: msg})
	}
	m.complete(k, i)
}

// heads are the pending positions that are the first of their key.
func (m *sim) heads(k int) []int {
	var h []int
	seen := map[string]bool{}
	for j, i := range m.st[k].pending {
		key := string(m.recs[i].Key)
		if !seen[key] {
			seen[key] = true
			h = append(h, j)
		}
	}
	return h
}

func (m *sim) finished() bool {
	for _, st := range m.st {
		if st.next < len(m.recs) {
			return false
		}
	}
	return true
}

func (m *sim) run() {
	n := len(m.stages)
	switch m.sched {
	case eager, stagewise:
		for !m.finished() {
			acted := false
			order := make([]int, n)
			for k := range order {
				order[k] = n - 1 - k // deepest first
				if m.sched == stagewise {
					order[k] = k
				}
			}
			for _, k := range order {
				if len(m.st[k].pending) > 0 {
					m.process(k, 0)
					acted = true
				} else if m.canSequence(k, 1) {
					m.sequence(k)
					acted = true
				}
				if acted {
					break
				}
			}
			require.True(m.t, acted, "deadlock")
			m.store.evict(m.evictWM())
		}
	case random:
		weight := make([]float64, n)
		for k := range weight {
			weight[k] = 0.2 + 5*m.rng.Float64()
		}
		for steps := 0; !m.finished(); steps++ {
			type action struct {
				k       int
				process bool
				w       float64
			}
			var acts []action
			total := 0.0
			for k := 0; k < n; k++ {
				if m.canSequence(k, 8) {
					acts = append(acts, action{k, false, weight[k]})
					total += weight[k]
				}
				if len(m.st[k].pending) > 0 {
					acts = append(acts, action{k, true, weight[k]})
					total += weight[k]
				}
			}
			require.NotEmpty(m.t, acts, "deadlock")
			x := m.rng.Float64() * total
			a := acts[len(acts)-1]
			for _, c := range acts {
				if x < c.w {
					a = c
					break
				}
				x -= c.w
			}
			if a.process {
				h := m.heads(a.k)
				m.process(a.k, h[m.rng.IntN(len(h))])
			} else {
				m.sequence(a.k)
			}
			if m.rng.IntN(16) == 0 {
				m.store.evict(m.evictWM())
			}
			if steps%5000 == 0 { // occasionally re-draw the stage speeds
				for k := range weight {
					weight[k] = 0.2 + 5*m.rng.Float64()
				}
			}
		}
		m.store.evict(m.evictWM())
	}
}

// check compares the simulated engine's results with the reference model.
func (m *sim) check(ref reference.Result) {
	t := m.t
	t.Helper()
	var refInvalid []int64
	for _, x := range ref.Invalid {
		refInvalid = append(refInvalid, x.Offset)
	}
	require.Equal(t, refInvalid, m.invalid, "dead-lettered offsets")
	require.True(t, ref.StreamTime.Equal(m.s[len(m.recs)]), "final stream time")
	wants := map[string][]reference.Output{attribution.StageClick: nil, attribution.StageVelocity: ref.Alerts,
		attribution.StageInstall: ref.Installs, attribution.StagePurchase: ref.Purchases}
	for k, stage := range m.stages {
		want := wants[stage.Name]
		got := m.out[k]
		if m.sched != random {
			require.True(t, sort.SliceIsSorted(got, func(a, b int) bool { return got[a].off < got[b].off }),
				"stage %s emits in offset order", m.stages[k].Name)
		}
		sort.SliceStable(got, func(a, b int) bool { return got[a].off < got[b].off })
		require.Equal(t, len(want), len(got), "stage %s output count", m.stages[k].Name)
		for j, w := range want {
			g := got[j]
			require.Equal(t, w.Offset, g.off, "stage %s output %d offset", m.stages[k].Name, j)
			if !bytes.Equal(w.Value, g.msg.Value) {
				t.Fatalf("stage %s offset %d:\nengine:    %s\nreference: %s", m.stages[k].Name, w.Offset, g.msg.Value, w.Value)
			}
			require.Equal(t, string(w.Key), string(g.msg.Key))
			require.Equal(t, []chain.Header{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(w.Partition, w.Offset)}},
				g.msg.Headers)
		}
	}
	snap, err := attribution.SnapshotOf(m.store.entries())
	require.NoError(t, err)
	got := reference.Usable(snap, m.s[len(m.recs)], m.cfg).String()
	if want := ref.Final.String(); got != want {
		t.Fatalf("final state differs:\n%s", lineDiff(want, got))
	}
}

func lineDiff(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var b strings.Builder
	for l := range w {
		if !g[l] {
			fmt.Fprintf(&b, "- reference only: %s\n", l)
		}
	}
	for l := range g {
		if !w[l] {
			fmt.Fprintf(&b, "+ engine only:    %s\n", l)
		}
	}
	return b.String()
}

// coverage counts what a workload exercised, from the reference results.
type coverage struct {
	records, invalid, dups, attributed, organic, laterWinner, purchases, purchasesAttributed, alerts int
}

func (c *coverage) add(recs []chain.Record, ref reference.Result) {
	c.records += len(recs)
	c.alerts += len(ref.Alerts)
	c.invalid += len(ref.Invalid)
	c.dups += len(ref.Duplicates)
	clickOffset := map[string]int64{}
	for _, r := range recs {
		var v struct{ Type, Event_ID string }
		if json.Unmarshal(r.Value, &v) == nil && v.Type == "click" {
			if _, ok := clickOffset[v.Event_ID]; !ok {
				clickOffset[v.Event_ID] = r.Offset
			}
		}
	}
	for _, o := range ref.Installs {
		var v struct {
			Attributed bool   `json:"attributed"`
			ClickID    string `json:"click_id"`
		}
		require.NoError(nil, json.Unmarshal(o.Value, &v))
		if v.Attributed {
			c.attributed++
			if clickOffset[v.ClickID] > o.Offset {
				c.laterWinner++
			}
		} else {
			c.organic++
		}
	}
	for _, o := range ref.Purchases {
		c.purchases++
		if !bytes.Contains(o.Value, []byte(`"install_id":""`)) {
			c.purchasesAttributed++
		}
	}
}

func diffConfigs() []attribution.Config {
	base := attribution.DefaultConfig()
	base.MaxRecordBytes = 4096
	late := base
	late.Lateness = 10 * time.Minute
	later := base
	later.Lateness = 3 * time.Hour
	later.DedupHorizon = 24 * time.Hour
	later.InstallRetention = 10 * 24 * time.Hour
	// The velocity stage runs in two of them (click → velocity → install
	// → purchase), with thresholds the workloads cross.
	late.Velocity = attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: time.Hour, Threshold: 1}
	later.Velocity = attribution.VelocityConfig{Window: 24 * time.Hour, Bucket: 15 * time.Minute, Lateness: 6 * time.Hour, Threshold: 3}
	return []attribution.Config{base, late, later}
}

func workloadConfig(seed uint64, records int) workload.Config {
	wc := workload.DefaultConfig()
	wc.Seed = seed
	wc.Records = records
	wc.Users = records / 20
	wc.MalformedFrac = 0.02
	wc.DupFrac = 0.05
	wc.LateClickFrac = 0.3
	wc.MaxRecordBytes = 4096
	return wc
}

// TestDifferential runs the processors under several engine schedules on
// generated workloads and compares every output, dead letter and the final
// usable state with the reference model.
func TestDifferential(t *testing.T) {
	records := 16_000
	seeds := []uint64{1, 2, 3}
	if testing.Short() || raceEnabled {
		records, seeds = 4000, seeds[:1]
	}
	var cov coverage
	for _, seed := range seeds {
		wc := workloadConfig(seed, records)
		parts := workload.Split(workload.Generate(wc), wc.Partitions)
		for ci, cfg := range diffConfigs() {
			for _, sched := range []schedule{eager, stagewise, random} {
				t.Run(fmt.Sprintf("seed%d/cfg%d/%s", seed, ci, sched), func(t *testing.T) {
					for p, recs := range parts {
						ref := reference.Run(recs, cfg)
						if sched == eager {
							cov.add(recs, ref)
						}
						m := newSim(t, recs, cfg, sched, seed*100+uint64(p))
						m.run()
						m.check(ref)
					}
				})
			}
		}
	}
	t.Logf("coverage: %+v", cov)
	require.Positive(t, cov.invalid)
	require.Positive(t, cov.dups)
	require.Positive(t, cov.attributed)
	require.Positive(t, cov.organic)
	require.Positive(t, cov.laterWinner, "installs won by a click at a larger offset")
	require.Positive(t, cov.purchasesAttributed)
	require.Greater(t, cov.purchases, cov.purchasesAttributed)
	require.Positive(t, cov.alerts, "velocity alerts")
}

// TestDifferentialLarge is the 100k-record, 8-partition workload.
func TestDifferentialLarge(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("large workload: not with -short or -race")
	}
	wc := workloadConfig(42, 100_000)
	wc.ZipfS = 1.3 // hot users: long click lists
	parts := workload.Split(workload.Generate(wc), wc.Partitions)
	cfg := diffConfigs()[1]
	for p, recs := range parts {
		start := time.Now()
		ref := reference.Run(recs, cfg)
		refTime := time.Since(start)
		m := newSim(t, recs, cfg, random, uint64(p))
		m.run()
		m.check(ref)
		t.Logf("partition %d: %d records, reference %v, sim %v", p, len(recs), refTime, time.Since(start)-refTime)
	}
}

// TestScenariosDifferential runs hand-written edge cases through every schedule.
func TestScenariosDifferential(t *testing.T) {
	cfg := attribution.DefaultConfig()
	cfg.Lateness = 5 * time.Minute
	cfg.DedupHorizon = time.Hour
	logs := [][]string{
		{install("i1", "u1", 0), click("x", "u2", 5*time.Minute, "X"), click("c1", "u1", -time.Minute, "A"),
			click("y", "u2", 5*time.Minute+1, "Y"), click("c2", "u1", -30*time.Second, "B"), purchase("p1", "u1", time.Hour, "1")},
		{click("c1", "u1", -7*24*time.Hour-5*time.Minute, "A"), install("i1", "u1", -5*time.Minute), click("z", "u3", 0, "Z"),
			install("i1", "u1", 0), click("w", "u3", 2*time.Hour, "W"), install("i1", "u1", 0), purchase("p", "u1", 0, "2")},
		{purchase("p0", "u1", 0, "1"), install("i1", "u1", time.Hour), click("c", "u1", 50*time.Minute, "A"),
			install("i2", "u1", time.Hour), purchase("p1", "u1", 31*24*time.Hour, "1"), purchase("p2", "u1", 2*time.Hour, "1")},
	}
	edge := attribution.DefaultConfig()
	edge.DedupHorizon = time.Hour
	day := 24 * time.Hour
	edgeLogs := [][]string{
		// Eviction at the exact edges: the slowest watermark equals
		// time + window when the entry is last used.
		{click("c1", "u1", -7*day, "A"), click("x", "u2", 0, "X"), purchase("q", "u2", 0, "1"), install("i1", "u1", 0)},
		{install("i1", "u1", -30*day), click("x", "u2", 0, "X"), purchase("p1", "u1", 0, "1")},
		{install("i1", "u1", 0), click("x", "u2", time.Hour, "X"), install("i1", "u1", 0)},
		{click("x", "u2", 0, "X"), purchase("q", "u2", 0, "1"), click("c1", "u1", -7*day, "A"), install("i1", "u1", 0)},
		// Trimming at the exact edge when a list is rewritten.
		{click("c1", "u1", -7*day, "A"), click("x", "u2", 0, "X"), purchase("q", "u2", 0, "1"),
			click("c2", "u1", -8*day, "B"), install("i1", "u1", 0)},
		{install("i1", "u1", -30*day), click("x", "u2", 0, "X"), click("y", "u3", 0, "Y"),
			install("i2", "u1", -40*day), purchase("p1", "u1", 0, "1")},
	}
	type scenario struct {
		cfg attribution.Config
		log []string
	}
	var all []scenario
	for _, l := range logs {
		all = append(all, scenario{cfg, l})
	}
	for _, l := range edgeLogs {
		all = append(all, scenario{edge, l})
	}
	// The velocity stage (threshold 2 in 1h of 1m buckets, lateness 30m)
	// at its edges: suppression exactly one window after an alert, state
	// evicted before the user clicks again, the lateness edge, duplicates.
	vel := edge
	vel.Velocity = attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: 30 * time.Minute, Threshold: 2}
	m := time.Minute
	velLogs := [][]string{
		{click("c1", "u1", 0, "A"), click("c2", "u1", m, "A"), click("c3", "u1", 2*m, "A"), install("i1", "u1", 3*m),
			click("c4", "u1", 30*m, "A"), click("c5", "u1", 61*m, "A"), click("c6", "u1", 62*m, "A"),
			click("c7", "u1", 62*m+1, "A"), purchase("p1", "u1", 63*m, "1")},
		{click("c1", "u1", 0, "A"), click("c2", "u1", 0, "A"), click("c3", "u1", 0, "A"),
			click("x1", "u2", 5*time.Hour, "X"), install("i2", "u2", 5*time.Hour), click("x2", "u2", 5*time.Hour, "X"),
			click("c4", "u1", 5*time.Hour, "A"), click("c5", "u1", 5*time.Hour, "A"), click("c6", "u1", 5*time.Hour, "A")},
		{click("c1", "u1", 40*m, "A"), click("c2", "u1", 45*m, "A"), click("l1", "u1", 15*m-1, "A"),
			click("l2", "u1", 15*m, "A"), click("c3", "u1", 45*m, "A"), click("c4", "u1", 46*m, "A")},
		{click("c1", "u1", 0, "A"), click("c1", "u1", 0, "A"), install("i1", "u1", m), click("c1", "u1", 0, "A"),
			click("c2", "u1", 2*m, "A"), click("c2", "u1", 2*m, "A"), click("c3", "u1", 3*m, "A")},
	}
	for _, l := range velLogs {
		all = append(all, scenario{vel, l})
	}
	alerts := 0
	for _, sc := range all {
		recs := recordsOf(sc.log...)
		ref := reference.Run(recs, sc.cfg)
		alerts += len(ref.Alerts)
		for _, sched := range []schedule{eager, stagewise, random} {
			for seed := uint64(0); seed < 5; seed++ {
				m := newSim(t, recs, sc.cfg, sched, seed)
				m.run()
				m.check(ref)
			}
		}
	}
	require.Equal(t, 6, alerts, "velocity scenarios: c3 and c6; c3 and c6; c3; c3")
}

func BenchmarkReference(b *testing.B) {
	wc := workloadConfig(7, 100_000)
	parts := workload.Split(workload.Generate(wc), wc.Partitions)
	cfg := attribution.DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		for _, recs := range parts {
			reference.Run(recs, cfg)
		}
	}
}
