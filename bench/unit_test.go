package bench

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
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
	wc := baseWorkload(3, 3000, 3, time.Millisecond)
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

// TestWriteSVG draws a synthetic report: every panel kind, well formed.
func TestWriteSVG(t *testing.T) {
	mk := func(rps float64, lat ...time.Duration) *DesignResult {
		p50, p99 := 10.0, 90.0
		d := &DesignResult{ThroughputRPS: rps, P50ms: &p50, P99ms: &p99, latencies: lat}
		for i := range 50 {
			d.series = append(d.series, seriesPoint{t: float64(i) * 0.02, done: int64(i) * int64(rps) / 50})
		}
		return d
	}
	floor := 50.0
	rep := &Report{Broker: "test", GoVersion: "go"}
	a := WorkloadResult{Workload: "A", Records: 100, Partitions: 8, Workers: 64, LatencyRecords: 10, LatencyRate: 5,
		Chain: mk(1000, time.Millisecond, 20*time.Millisecond), MicroBatch: mk(100, 100*time.Millisecond, 300*time.Millisecond), RatioThroughput: 10}
	a.Chain.FloorP99ms = &floor
	rep.Workloads = append(rep.Workloads, a)
	for _, p := range []int{4, 16, 64} {
		for _, w := range []int{4, 16, 64} {
			rep.Workloads = append(rep.Workloads, WorkloadResult{Workload: "C", Partitions: p, Workers: w,
				Chain: mk(float64(p * w)), MicroBatch: mk(float64(p)), RatioThroughput: float64(w)})
		}
	}
	var b strings.Builder
	require.NoError(t, rep.WriteSVG(&b))
	svg := b.String()
	require.True(t, strings.HasPrefix(svg, "<svg") && strings.HasSuffix(svg, "</svg>\n"))
	require.Equal(t, 4, strings.Count(svg, "<polyline"), "two throughput curves and two CDFs")
	require.Contains(t, svg, "P=64 W=64")
	if path := os.Getenv("BENCH_SVG_OUT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(svg), 0o644))
	}
}
