package bench

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// referenceTopics turns the expectation into the topics a correct design
// writes: one output per expected source, one dead letter per invalid input.
func referenceTopics(e *expectation) (outs, dlq map[int32][]*sarama.ConsumerMessage) {
	outs, dlq = map[int32][]*sarama.ConsumerMessage{}, map[int32][]*sarama.ConsumerMessage{}
	for p, log := range e.parts {
		for o := range log {
			src := source{int32(p), int64(o)}
			if out, ok := e.outputs[src]; ok {
				outs[int32(p)] = append(outs[int32(p)], &sarama.ConsumerMessage{
					Key: out.Key, Value: out.Value, Offset: int64(len(outs[int32(p)])),
					Headers: []*sarama.RecordHeader{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(int32(p), int64(o))}},
				})
			}
			if e.invalid[src] {
				dlq[0] = append(dlq[0], &sarama.ConsumerMessage{
					Key: log[o].Key, Value: log[o].Value,
					Headers: []*sarama.RecordHeader{
						{Key: []byte(chain.HeaderDLQPartition), Value: []byte(strconv.Itoa(p))},
						{Key: []byte(chain.HeaderDLQOffset), Value: []byte(strconv.Itoa(o))},
					},
				})
			}
		}
	}
	return outs, dlq
}

func smallExpectation(t *testing.T) *expectation {
	t.Helper()
	wc := baseWorkload(3, 3, time.Millisecond)
	wc.Records = 3000
	return newExpectation(workload.Generate(wc), 3, 8, attributionConfig(), 100*time.Millisecond)
}

func TestVerifyFailsOnLossDuplicationAndChange(t *testing.T) {
	e := smallExpectation(t)
	outs, dlq := referenceTopics(e)
	c := e.verify(outs, dlq)
	require.True(t, c.OK, "%+v", c)
	require.Equal(t, len(e.outputs), c.Outputs)
	require.Equal(t, len(e.invalid), c.DeadLetters)

	lost := map[int32][]*sarama.ConsumerMessage{0: outs[0][1:], 1: outs[1], 2: outs[2]}
	c = e.verify(lost, dlq)
	require.False(t, c.OK)
	require.Equal(t, 1, c.Missing)

	dup := map[int32][]*sarama.ConsumerMessage{0: append(append([]*sarama.ConsumerMessage{}, outs[0]...), outs[0][3]), 1: outs[1], 2: outs[2]}
	c = e.verify(dup, dlq)
	require.False(t, c.OK)
	require.Equal(t, 1, c.Duplicates)

	changed := *outs[1][0]
	changed.Value = append([]byte(nil), changed.Value...)
	changed.Value[len(changed.Value)-2] ^= 1
	chg := map[int32][]*sarama.ConsumerMessage{0: outs[0], 1: append([]*sarama.ConsumerMessage{&changed}, outs[1][1:]...), 2: outs[2]}
	c = e.verify(chg, dlq)
	require.False(t, c.OK)
	require.Equal(t, 1, c.Mismatched)

	c = e.verify(outs, map[int32][]*sarama.ConsumerMessage{0: dlq[0][1:]})
	require.False(t, c.OK)
	require.Equal(t, 1, c.Missing)
}

func TestBoundIsBelowChainOrderBound(t *testing.T) {
	e := smallExpectation(t)
	b := e.bound
	require.Greater(t, b.TotalCost, time.Duration(0))
	require.LessOrEqual(t, b.LongestChain, b.LongestKey)
	require.Equal(t, max(b.TotalCost/8, b.LongestChain), b.Time)
	require.LessOrEqual(t, b.Time, b.ChainOrderTime)
	require.GreaterOrEqual(t, b.ChainOrderPath, b.LongestChain)
	require.LessOrEqual(t, b.KeyOrderPath, b.ChainOrderPath, "the key rule waits for a subset of what the partition rule waits for")
	require.GreaterOrEqual(t, b.KeyOrderPath, b.LongestChain)
	require.LessOrEqual(t, b.Time, b.KeyOrderTime)
}

// TestChainOrderPath walks one small log by hand: a follower record waits
// for its leader's prefix and watermark, and one key's records of a stage
// run in order.
func TestChainOrderPath(t *testing.T) {
	ms := time.Millisecond
	log := []pathRecord{
		{valid: true, stage: 0, t: 10, key: "u", cost: 5 * ms}, // click: 0 → 5
		{valid: true, stage: 1, t: 11, key: "u", cost: 2 * ms}, // install: leader past offset 2 (t 12 > 11): 5 → 7
		{valid: true, stage: 0, t: 12, key: "v", cost: 1 * ms}, // click: 0 → 1
		{valid: true, stage: 2, t: 13, key: "u", cost: 3 * ms}, // purchase: no later time: idle release at max(install stage's end 7, idle 100) → 103
	}
	require.Equal(t, 103*ms, chainOrderPath(log, 0, 100*ms))
	// A leader that ends after the idle timeout releases when it ends.
	require.Equal(t, 10*ms, chainOrderPath(log, 0, 2*ms))
}

// TestKeyOrderPath walks one small log by hand under the key-scoped gate:
// the install of u waits for u's click only, not for v's slow one before
// it, which the partition gate makes it wait for; both wait for the idle
// release when no later event time comes.
func TestKeyOrderPath(t *testing.T) {
	ms := time.Millisecond
	log := []pathRecord{
		{valid: true, stage: 0, t: 10, key: "v", cost: 50 * ms}, // click v: 0 → 50
		{valid: true, stage: 0, t: 11, key: "u", cost: 1 * ms},  // click u: 0 → 1
		{valid: true, stage: 1, t: 12, key: "u", cost: 1 * ms},  // install u: key gate 1 → 2; partition gate 50 → 51
		{valid: true, stage: 0, t: 20, key: "w", cost: 1 * ms},  // click w: 0 → 1 (q for the install)
	}
	require.Equal(t, 51*ms, chainOrderPath(log, 0, 100*ms))
	// The end is v's click (50): the purchase stage's skip of v@0 waits for
	// it, nothing else does.
	require.Equal(t, 50*ms, keyOrderPath(log, 0, 100*ms))
	// The same log as TestChainOrderPath: the purchase waits for the idle
	// release under both rules.
	same := []pathRecord{
		{valid: true, stage: 0, t: 10, key: "u", cost: 5 * ms},
		{valid: true, stage: 1, t: 11, key: "u", cost: 2 * ms},
		{valid: true, stage: 0, t: 12, key: "v", cost: 1 * ms},
		{valid: true, stage: 2, t: 13, key: "u", cost: 3 * ms},
	}
	require.Equal(t, 103*ms, keyOrderPath(same, 0, 100*ms))
	require.Equal(t, 10*ms, keyOrderPath(same, 0, 2*ms))
	// A duplicate costs nothing but still waits for its gate; a skipped
	// record of another key does not hold u's.
	dup := []pathRecord{
		{valid: true, stage: 0, t: 10, key: "u", cost: 5 * ms},
		{valid: true, dup: true, stage: 1, t: 11, key: "u", cost: 9 * ms},
		{valid: true, stage: 1, t: 12, key: "u", cost: 2 * ms},
		{valid: true, stage: 0, t: 30, key: "x", cost: 1 * ms},
	}
	require.Equal(t, 7*ms, keyOrderPath(dup, 0, 100*ms))
}

func TestQuantile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	require.Equal(t, time.Duration(5), quantile(d, 0.5))
	require.Equal(t, time.Duration(10), quantile(d, 0.99))
	require.Equal(t, time.Duration(0), quantile(nil, 0.5))
}

// TestStagedTime works a two-partition log by hand: the bound is, per
// batch and stage, max(cost ÷ W, longest task), summed; tasks are keys with
// key order and partitions without.
func TestStagedTime(t *testing.T) {
	ms := time.Millisecond
	r := func(stage int, key string, cost time.Duration) pathRecord {
		return pathRecord{valid: true, stage: stage, key: key, cost: cost}
	}
	paths := [][]pathRecord{
		{r(0, "u", 4*ms), r(0, "v", 2*ms), r(1, "u", 3*ms), {valid: false, stage: -1}},
		{r(0, "w", 6*ms), {valid: true, dup: true, stage: 1, key: "w", cost: 9 * ms}, r(2, "w", 1*ms)},
	}
	// One batch, key order, W=2: clicks u4 v2 w6 → max(12/2, 6) = 6;
	// installs u3 → 3 (the duplicate costs nothing); purchases w1 → 1.
	require.Equal(t, 10*ms, stagedTime(paths, 0, 2, true))
	// Partition order: clicks p0 4+2=6, p1 6 → max(12/2, 6) = 6; the same.
	require.Equal(t, 10*ms, stagedTime(paths, 0, 2, false))
	// W=1: clicks 12, installs 3, purchases 1.
	require.Equal(t, 16*ms, stagedTime(paths, 0, 1, true))
	// Batches of 2, round-robin: {p0 u4, p1 w6} → 6; {p0 v2, p1 dup} → 2;
	// {p0 u3 install, p1 w1 purchase} → 3 + 1; {p0 invalid} → 0. Barriers
	// add up: 12 > 10.
	require.Equal(t, 12*ms, stagedTime(paths, 2, 2, true))
	// Per-partition order serialises a partition's records of a stage:
	// one batch of partition p0's two clicks at W=64 takes 4+2.
	one := [][]pathRecord{{r(0, "u", 4*ms), r(0, "v", 2*ms)}}
	require.Equal(t, 6*ms, stagedTime(one, 0, 64, false))
	require.Equal(t, 4*ms, stagedTime(one, 0, 64, true))
}

// TestStagedBoundsOfAWorkload: on a generated input the micro-batch bounds
// are never below the pipelined bound, bigger batches never cost more
// barriers than one batch of everything saves, and per-partition order is
// never faster than per-key order.
func TestStagedBoundsOfAWorkload(t *testing.T) {
	e := smallExpectation(t)
	b := e.bound
	all := e.stagedTime(0, true)
	require.GreaterOrEqual(t, all, b.Time)
	for _, n := range []int{100, 500, 2000} {
		require.GreaterOrEqual(t, e.stagedTime(n, true), all, "batch %d", n)
		require.GreaterOrEqual(t, e.stagedTime(n, false), e.stagedTime(n, true), "batch %d", n)
	}
}

// TestNextSizeCoversTheCheckpointDeficit: a chain run long enough in time
// but with too few checkpoints (cycles longer than the interval) grows
// enough for minCheckpoints at its own rate in one try, not one ×1.5 step.
func TestNextSizeCoversTheCheckpointDeficit(t *testing.T) {
	o := Options{}.withDefaults()
	long := o.Duration.Seconds() + 1
	// 3 checkpoints on 20,000 records: 10 need ≥ 66,667, with a quarter more.
	r := &DesignResult{Elapsed: long, ThroughputRPS: 20_000 / long, CheckpointsMost: 3, Commits: 30}
	require.GreaterOrEqual(t, nextSize(o, r, 20_000, 0, true), 83_334)
	r.Commits = 2 // the shorter of the two counts
	require.GreaterOrEqual(t, nextSize(o, r, 20_000, 0, true), 125_000)
	// A micro-batch's steadiness counts no checkpoints: one step.
	require.Equal(t, ladder(20_000*1.5), nextSize(o, r, 20_000, 0, false))
	// Enough checkpoints: one step (or what the rate asks for).
	r.CheckpointsMost, r.Commits = 12, 12
	require.Equal(t, ladder(20_000*1.5), nextSize(o, r, 20_000, 0, true))
}

func TestLadderAndSizing(t *testing.T) {
	require.Equal(t, 1000, ladder(0))
	require.Equal(t, 1000, ladder(1000))
	require.Equal(t, 1410, ladder(1001))
	require.Equal(t, 2000, ladder(1900))
	require.Equal(t, 16000, ladder(15000))
	o := Options{Quick: false}.withDefaults()
	require.Equal(t, 2500*time.Millisecond, o.Duration)
	require.Equal(t, 200*time.Millisecond, o.CommitInterval)
	// 10,000 rec/s for 2.5s with a 25% margin, plus a batch of 500.
	n := o.sizeFor(10_000, 500)
	require.GreaterOrEqual(t, float64(n), 10_000*2.5*1.25+500)
	require.Less(t, float64(n), (10_000*2.5*1.25+500)*1.42)
	require.ErrorContains(t, Options{Duration: time.Second, CommitInterval: 200 * time.Millisecond}.Validate(),
		"--duration (1s) must be at least 10 × --commit-interval (200ms)", "a run shorter than ten checkpoint intervals is refused")
}

// TestStreamIsSteady: the stream keeps the records produced in its steady
// part, every partition's offsets numbered from 0 in order, and its event
// times spread over a span that grows with the record count (so the
// records per day, and the state a user keeps, stay the same).
func TestStreamIsSteady(t *testing.T) {
	small, big := newStream(baseWorkload(1, 4, 0), 2000), newStream(baseWorkload(1, 4, 0), 60_000)
	for _, s := range []*stream{small, big} {
		next := make([]int64, 4)
		for _, r := range s.recs {
			require.Equal(t, next[r.Partition], r.Offset)
			next[r.Partition]++
			require.False(t, r.Timestamp.Before(s.from))
			require.True(t, r.Timestamp.Before(s.to))
			require.True(t, r.Timestamp.Before(time.Now()), "a real broker accepts every timestamp")
		}
		perDay := float64(len(s.recs)) / (s.to.Sub(s.from).Hours() / 24)
		require.InDelta(t, streamDensity, perDay, streamDensity*0.25, "records per day of the steady part")
	}
	require.GreaterOrEqual(t, len(big.recs), 60_000)
	require.Greater(t, big.to.Sub(big.from), 2*small.to.Sub(small.from))

	// The same mix of clicks, installs and purchases all along: its first
	// and last fifths are alike (the raw log's start is nearly all clicks).
	mix := func(recs []workload.Record) map[string]float64 {
		m := map[string]float64{}
		for _, r := range recs {
			m[strings.SplitN(r.Kind, "/", 2)[0]] += 1 / float64(len(recs))
		}
		return m
	}
	n := len(big.recs)
	first, last := mix(big.recs[:n/5]), mix(big.recs[n-n/5:])
	for _, k := range []string{"click", "install", "purchase"} {
		require.InDelta(t, first[k], last[k], 0.03, "%s share: first fifth %.3f, last fifth %.3f", k, first[k], last[k])
	}
	raw := baseWorkload(1, 4, 0)
	raw.Records, raw.Start, raw.Span = 20_000, streamStart, 21*day
	rawMix := mix(workload.Generate(raw)[:4000])
	require.Greater(t, rawMix["click"]-first["click"], 0.1, "the raw log's start is mostly clicks: what the cut removes")
}

func TestEventsWindow(t *testing.T) {
	e := &events{syncs: []syncEvent{{10, []int32{0}}, {20, []int32{0, 1}}, {30, []int32{1}}, {40, []int32{0}}},
		commits: []int64{15, 25, 45}}
	syncs, commits, most, fewest := e.window(15, 35, 3)
	require.Equal(t, 2, syncs)
	require.Equal(t, 2, commits) // at 15 and 25
	require.Equal(t, 2, most)    // partition 1: at 20 and 30
	require.Equal(t, 0, fewest)
}

// TestCountingStoreKeepsTheChangelog: the chain's store wrapper counts
// checkpoints, plain or prepared, and still lets a chain follow a changelog
// (a chain variant may).
func TestCountingStoreKeepsTheChangelog(t *testing.T) {
	ev := &events{}
	ps, err := countingStore{store.NewMemory(), ev}.OpenPartition("t", 3, []string{"a"})
	require.NoError(t, err)
	cs, ok := ps.(chain.ChangelogStore)
	require.True(t, ok)
	require.NoError(t, cs.Checkpoint([]commit.Checkpoint{{Stage: "a", Next: 1}}, time.Time{}))
	pc, err := cs.PrepareCheckpoint([]commit.Checkpoint{{Stage: "a", Next: 2}}, time.Time{})
	require.NoError(t, err)
	require.NoError(t, pc.Commit(7))
	syncs, _, most, _ := ev.window(0, time.Now().UnixNano(), 4)
	require.Equal(t, 2, syncs)
	require.Equal(t, 2, most)
}

// TestTargetAboveTheLimitIsQualified: a throughput ratio above what the
// bounds allow (the baseline ran further below its bound than the chain)
// is reported with a note saying so, not as a plain MET.
func TestTargetAboveTheLimitIsQualified(t *testing.T) {
	eff := func(f float64) *float64 { return &f }
	w := WorkloadResult{Workload: "A",
		Chain:       &DesignResult{Steady: true, EfficiencyOwn: eff(0.72)},
		Strongest:   &DesignResult{Steady: true, EfficiencyOwn: eff(0.57)},
		Design6:     &DesignResult{Steady: true},
		VsStrongest: &Comparison{Throughput: 3.62},
		Limit:       &Limit{MaxWin: 2.90},
	}
	find := func(ts []Target) Target {
		for _, tg := range ts {
			if strings.HasPrefix(tg.Name, "A: chain ÷ strongest micro-batch throughput") {
				return tg
			}
		}
		t.Fatal("no A strongest throughput target")
		return Target{}
	}
	tg := find(targets([]WorkloadResult{w}))
	require.True(t, tg.Met)
	require.Contains(t, tg.Note, "above the 2.90× the bounds allow")
	require.Contains(t, tg.Note, "0.57")

	w.VsStrongest.Throughput = 2.5
	require.Empty(t, find(targets([]WorkloadResult{w})).Note)
}

// The median of an even count is the mean of the middle two.
func TestMedianOf(t *testing.T) {
	require.InDelta(t, 2.5, *medianOf([]float64{4, 1, 3, 2}), 1e-9)
	require.InDelta(t, 3, *medianOf([]float64{4, 1, 3}), 1e-9)
}

// The chain's key concurrency is W unless set, at most W, and C keeps
// its own W.
func TestChainKeyConcurrency(t *testing.T) {
	o := Options{}.withDefaults()
	a, c := point{name: "A", workers: 64}, point{name: "C", workers: 16}
	require.Equal(t, 64, o.chainKeyConcurrency(a))
	o.KeyConcurrency = 2
	require.NoError(t, o.validate())
	require.Equal(t, 2, o.chainKeyConcurrency(a))
	require.Equal(t, 16, o.chainKeyConcurrency(c))
	o.KeyConcurrency = 65
	require.ErrorContains(t, o.validate(), "--key-concurrency must be in [1, --workers=64]")
}

// TestProgressCommittedClosesAtEveryEnd: cdone closes once every partition
// with records has committed its end, not before, whatever the order and
// repeats of the commits; a partition without records is not waited for.
func TestProgressCommittedClosesAtEveryEnd(t *testing.T) {
	p := newProgress([]int64{10, 0, 5})
	closed := func() bool {
		select {
		case <-p.cdone:
			return true
		default:
			return false
		}
	}
	p.commit(0, 4)
	p.commit(2, 5)
	require.False(t, closed(), "partition 0 is at 4 of 10")
	p.commit(2, 5)
	p.commit(0, 9)
	require.False(t, closed())
	p.commit(0, 10)
	require.True(t, closed(), "every partition with records committed its end")
	p.commit(0, 11) // a later commit does not close it again
	p.commit(7, 1)  // nor does a partition the input does not have
	require.True(t, closed())
	require.True(t, func() bool {
		select {
		case <-newProgress([]int64{0}).cdone:
			return true
		default:
			return false
		}
	}(), "nothing to commit")
}
