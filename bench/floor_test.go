package bench

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

const floorBase = int64(1_700_000_000_000_000_000) // a unix-ns origin for the send times

// floorFixture is one partition's log sent at sent[x] (offsets from
// floorBase): the expectation (gates of its installs and purchases), the
// feeder's send times and one ack per output.
func floorFixture(log []pathRecord, sent []time.Duration, lateness time.Duration) (*expectation, *feeder, []ack) {
	e := &expectation{outputs: map[source]reference.Output{}, paths: [][]pathRecord{log}}
	f := &feeder{sentAt: make([][]atomic.Int64, 1)}
	f.sentAt[0] = make([]atomic.Int64, len(log))
	var acks []ack
	for x := range log {
		f.sentAt[0][x].Store(floorBase + int64(sent[x]))
		if r := log[x]; r.valid && !r.dup && (r.stage == 1 || r.stage == 2) {
			e.outputs[source{0, int64(x)}] = reference.Output{}
			acks = append(acks, ack{src: source{0, int64(x)}})
		}
	}
	return e, f, acks
}

// floorsOf returns each output's one-horizon floor (latencyFloor) and its
// cascaded floor under r, by offset.
func floorsOf(t *testing.T, log []pathRecord, sent []time.Duration, r floorRule) (one, cascaded map[int64]time.Duration) {
	t.Helper()
	e, f, acks := floorFixture(log, sent, r.lateness)
	one, cascaded = map[int64]time.Duration{}, map[int64]time.Duration{}
	cache := map[int32][3][]int64{}
	for _, a := range acks {
		o, ok := latencyFloor(a, f, floorBase, floorBase+int64(time.Hour), e, r.lateness, r.idle)
		require.True(t, ok)
		c, ok := cascadeFloor(a, f, floorBase, floorBase+int64(time.Hour), e, r, cache)
		require.True(t, ok)
		one[a.src.offset], cascaded[a.src.offset] = o, c
	}
	return one, cascaded
}

// latencyFloor is one output's one-horizon floor, the cascade's check:
// the time from sending its input until its own event-time gate opens —
// when the record that raises the partition's stream time past t+Lateness
// is sent, or when the partition has been quiet for IdleTimeout, whichever
// is first — plus its own cost. The cascade adds the leaders' gates and
// costs, so it is never below this.
func latencyFloor(a ack, f *feeder, from, to int64, e *expectation, lateness, idle time.Duration) (time.Duration, bool) {
	p, o := a.src.partition, a.src.offset
	if int(p) >= len(f.sentAt) || o >= int64(len(f.sentAt[p])) {
		return 0, false
	}
	sent := f.sentAt[p][o].Load()
	if _, ok := e.outputs[a.src]; sent < from || sent > to || !ok {
		return 0, false
	}
	log := e.paths[p]
	maxT := watermarks(log)
	// after: the first offset whose stream time exceeds t+Lateness (none
	// in the log: only the idle release opens the gate).
	after := int64(firstAbove(maxT, log[o].t+int64(lateness)))
	wait := time.Duration(0)
	if after > o {
		n := int64(len(f.sentAt[p]))
		open, prev := int64(-1), sent
		for k := o + 1; k <= after && k < n; k++ {
			at := f.sentAt[p][k].Load()
			if time.Duration(at-prev) > idle {
				open = prev + int64(idle)
				break
			}
			if k == after {
				open = at
				break
			}
			prev = at
		}
		if open < 0 {
			open = prev + int64(idle)
		}
		wait = max(time.Duration(open-sent), 0)
	}
	return wait + log[o].cost, true
}

func rec(stage int, key string, tSec int64, cost time.Duration) pathRecord {
	return pathRecord{valid: true, stage: stage, t: tSec * int64(time.Second), key: key, cost: cost}
}

const msec = time.Millisecond

// A purchase whose own gate is open on arrival (a record with a later event
// time is already in) still waits for the install before it whose event
// time is later: the install waits for q(t_install+Lateness), the second
// horizon, ~100ms later; the cascaded floor is that plus the install's and
// the purchase's costs. Dropping the cascade gives the one-horizon 3ms.
func TestCascadedFloorTwoHorizons(t *testing.T) {
	log := []pathRecord{
		rec(0, "u", 10, 1*msec),  // click u
		rec(1, "u", 100, 2*msec), // install u, event time after the purchase's
		rec(2, "u", 50, 3*msec),  // purchase u: q(50) is offset 1, already in
		rec(0, "v", 60, 1*msec),
		rec(0, "w", 200, 1*msec), // carries stream time past 100: opens the install
		rec(0, "w", 300, 1*msec),
	}
	sent := []time.Duration{0, 1 * msec, 2 * msec, 3 * msec, 100 * msec, 150 * msec}
	one, c := floorsOf(t, log, sent, floorRule{scope: chain.GateKey, idle: time.Second})
	require.Equal(t, 3*msec, one[2], "one-horizon floor: the purchase's own cost")
	// The install completes at 100ms (its q arrives) + 2ms; the purchase
	// then takes 3ms; − sent 2ms.
	require.Equal(t, 103*msec, c[2], "key scope: the purchase waits for the install's horizon")
	// The install's own floor is one horizon: both agree.
	require.Equal(t, 101*msec, one[1])
	require.Equal(t, one[1], c[1])
	// Partition scope: the install stage also passes the click carrying
	// the install's q (done 101ms), one more millisecond on both.
	_, p := floorsOf(t, log, sent, floorRule{scope: chain.GatePartition, idle: time.Second})
	require.Equal(t, map[int64]time.Duration{1: 102 * msec, 2: 104 * msec}, p)
}

// When the install's event time is before the purchase's, the purchase's
// own horizon is the later one and the install's cost is paid before it:
// both floors agree.
func TestCascadedFloorEqualsOneHorizon(t *testing.T) {
	log := []pathRecord{
		rec(0, "u", 10, 1*msec),
		rec(1, "u", 20, 2*msec),
		rec(2, "u", 50, 3*msec),
		rec(0, "v", 30, 1*msec),
		rec(0, "w", 60, 1*msec), // opens the purchase (stream time past 50)
	}
	sent := []time.Duration{0, 1 * msec, 2 * msec, 3 * msec, 100 * msec}
	for _, scope := range []chain.GateScope{chain.GateKey, chain.GatePartition} {
		one, c := floorsOf(t, log, sent, floorRule{scope: scope, idle: time.Second})
		require.Equal(t, map[int64]time.Duration{1: 3 * msec, 2: 101 * msec}, one)
		if scope == chain.GateKey {
			require.Equal(t, one, c, "%s scope", scope)
			continue
		}
		// Partition scope: the install stage must also have passed the
		// click at offset 4, which completes 1ms after it arrives.
		require.Equal(t, map[int64]time.Duration{1: 3 * msec, 2: 102 * msec}, c)
	}
}

// Under the key scope only the purchase's own key cascades: another user's
// late install holds the partition scope's purchase, not the key scope's.
func TestCascadedFloorKeyScopeIgnoresOtherKeys(t *testing.T) {
	log := []pathRecord{
		rec(1, "x", 100, 2*msec), // install of x with a late event time
		rec(2, "u", 50, 3*msec),  // purchase of u: q(50) is offset 0
		rec(0, "w", 200, 1*msec), // opens x's install at 100ms
	}
	sent := []time.Duration{0, 1 * msec, 100 * msec}
	_, key := floorsOf(t, log, sent, floorRule{scope: chain.GateKey, idle: time.Second})
	_, part := floorsOf(t, log, sent, floorRule{scope: chain.GatePartition, idle: time.Second})
	require.Equal(t, 3*msec, key[1])
	// Partition scope: x's install waits for q (100ms) and the install
	// stage's pass over the click carrying it (done at 101ms), completes at
	// 103ms; the purchase + 3ms, − 1ms.
	require.Equal(t, 105*msec, part[1])
}

// The idle release opens a gate no later than a quiet gap: a purchase at
// the end of the log (no q) and the install it cascades on are released
// idle after the last arrival in both floors; the cascaded one also waits
// for the leader to have completed what arrived (the leader is not idle
// before).
func TestCascadedFloorIdleRelease(t *testing.T) {
	log := []pathRecord{
		rec(1, "u", 100, 2*msec),
		rec(2, "u", 50, 3*msec),
	}
	sent := []time.Duration{0, 1 * msec}
	one, c := floorsOf(t, log, sent, floorRule{scope: chain.GateKey, idle: 50 * msec})
	require.Equal(t, 53*msec, one[0]) // released at 51ms, + 2ms, − 0
	require.Equal(t, 3*msec, one[1])  // its own q (offset 0) is in
	require.Equal(t, 53*msec, c[0])
	require.Equal(t, 55*msec, c[1]) // the install stage is idle at 53ms, + 3ms, − 1ms
}

// On random streams the cascaded floor is never below the one-horizon
// floor (it adds waits, never removes one), and the partition scope's
// never below the key scope's.
func TestCascadedFloorIsAtLeastOneHorizon(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(40)
		log := make([]pathRecord, n)
		sent := make([]time.Duration, n)
		at := time.Duration(0)
		for x := range log {
			log[x] = rec(rng.IntN(3), string(rune('a'+rng.IntN(4))), int64(rng.IntN(100)), time.Duration(rng.IntN(5))*msec)
			log[x].dup = rng.IntN(10) == 0
			log[x].valid = rng.IntN(20) != 0
			at += time.Duration(rng.IntN(40)) * msec
			sent[x] = at
		}
		lateness := time.Duration(rng.IntN(3)) * time.Second
		idle := time.Duration(20+rng.IntN(60)) * msec
		one, key := floorsOf(t, log, sent, floorRule{scope: chain.GateKey, lateness: lateness, idle: idle})
		_, part := floorsOf(t, log, sent, floorRule{scope: chain.GatePartition, lateness: lateness, idle: idle})
		for o := range one {
			require.GreaterOrEqual(t, key[o], one[o], "offset %d", o)
			require.GreaterOrEqual(t, part[o], key[o], "offset %d", o)
		}
	}
}

// The floor target divides the chain's p99 by the rules' (cascaded)
// floor; a report without it has no floor target.
func TestFloorTargetUsesTheRulesFloor(t *testing.T) {
	p99, rules, base, lower := 110.0, 100.0, 600.0, 600.0/110
	w := WorkloadResult{Workload: "A", Chain: &DesignResult{Design: string(kindChain)},
		VsDesign6: &Comparison{Chain: &LatencyResult{P99ms: &p99}, Base: &LatencyResult{P99ms: &base}, P99Lower: &lower, RulesFloorP99ms: &rules}}
	find := func(ts []Target) *Target {
		for i := range ts {
			if strings.HasPrefix(ts[i].Name, "A: chain p99 ÷ event-time floor p99") {
				return &ts[i]
			}
		}
		return nil
	}
	tg := find(targets([]WorkloadResult{w}))
	require.NotNil(t, tg)
	require.Contains(t, tg.Name, "the rules', cascaded")
	require.InDelta(t, 1.1, tg.Got, 1e-9)
	require.True(t, tg.Met)
	found := false
	for _, x := range targets([]WorkloadResult{w}) {
		if strings.HasPrefix(x.Name, "A: micro-batch baseline ÷ chain p99") {
			require.Equal(t, "at most 6.00 for any engine obeying the rules: the baseline's p99 ÷ the rules' event-time floor p99", x.Note)
			found = true
		}
	}
	require.True(t, found)

	w.VsDesign6.RulesFloorP99ms = nil
	require.Nil(t, find(targets([]WorkloadResult{w})))
}

// The throughput target against DESIGN.md "The micro-batch baseline" names the most any engine
// obeying the rules could show against that run: the rules' bound under
// the chain's gate scope on the chain's input ÷ the micro-batch baseline's measured rate.
func TestDesign6ThroughputTargetNamesTheRulesBound(t *testing.T) {
	eff := 0.94
	w := WorkloadResult{Workload: "A", Gate: string(chain.GateKey),
		Chain:     &DesignResult{Design: string(kindChain), ThroughputRPS: 6000, EfficiencyOwn: &eff},
		Design6:   &DesignResult{ThroughputRPS: 400},
		VsDesign6: &Comparison{Throughput: 15},
		Limit:     &Limit{KeyOrderRPS: 6400, ChainOrderRPS: 6000}}
	find := func() *Target {
		for _, x := range targets([]WorkloadResult{w}) {
			if strings.HasPrefix(x.Name, "A: chain ÷ micro-batch baseline throughput, key-scoped gate") {
				return &x
			}
		}
		return nil
	}
	tg := find()
	require.NotNil(t, tg)
	require.Equal(t, "at most 16.00× for any engine obeying the rules: their bound (key gate) on the chain's input ÷ this baseline run; the chain at 0.94 of it", tg.Note)
	w.Gate = string(chain.GatePartition)
	require.Equal(t, "at most 15.00× for any engine obeying the rules: their bound (partition gate) on the chain's input ÷ this baseline run; the chain at 0.94 of it", find().Note)
	w.Limit = nil
	require.Empty(t, find().Note)
}
