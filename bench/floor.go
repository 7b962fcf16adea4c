package bench

import (
	"math"
	"slices"
	"time"

	"github.com/differential-dev/differential/chain"
)

// The cascaded event-time floor: the least latency any engine
// that follows the gate rules of DESIGN.md "Mechanisms" can have on the run's own arrival
// times. A one-horizon floor would let an output go as soon as
// the record that carries the partition's stream time past t+Lateness
// arrives (or the partition goes quiet for IdleTimeout), plus the record's
// own cost. But a follower waits for its leader's *completion* (DESIGN.md "Mechanisms"
// (a)/(b), (a′)/(b′)), and the leader is itself a follower of the stage
// before it: a purchase (t, key u) waits until the install stage has
// completed u's records below q(t+Lateness); an install of u among them
// waits for the click stage on u up to q(t_install+Lateness) — a second
// lateness horizon, later than the purchase's own when the install's event
// time is later than the purchase's — and for the clicks' costs. The
// cascade applies the rules stage after stage on the arrival times.

// floorRule is the gate rule a cascaded floor follows.
type floorRule struct {
	// scope: chain.GateKey applies (a′)/(b′) (the leader's records of the
	// record's key only), chain.GatePartition (a)/(b) (every record).
	scope    chain.GateScope
	distance int64 // OffsetDistance
	lateness time.Duration
	idle     time.Duration // IdleTimeout
}

const never = int64(math.MaxInt64)

// cascadeDone returns done[k][x], the earliest time (unix ns) stage k
// (0 click, 1 install, 2 purchase) can have completed record x of one
// partition's log, given when each record was sent (sent[x], unix ns), with
// unlimited workers and no engine overhead:
//
//   - stage 0 has no gate: a record it processes (valid, not a duplicate,
//     a click) begins when it arrives and its key's previous click
//     completed, and takes its cost; any other record completes on
//     arrival.
//   - stage k ≥ 1 may begin x when x arrived and its gate is open: the
//     leader (stage k−1) has completed every record (partition scope) or
//     every record of x's key (key scope) at offsets ≤ x+distance and, when
//     stage k processes x, at offsets < q(t+lateness) — the first offset j
//     whose own event time carries the stream time past t+lateness, which
//     must have arrived (q = j+1); with no such offset only the idle
//     release opens it. Or the partition is idle: no record arrived for
//     idle since the last one after x (the earliest the engine's idle
//     release can fire; it also needs the leader caught up, which only
//     makes it later — leaving that out keeps the floor a lower bound).
//     A processed record also waits for its key's previous record of the
//     stage (one key's records run in offset order) and takes its cost;
//     a skipped one (another type, a duplicate, invalid) completes when its
//     gate opens. Duplicates are treated as skipped, which is at most what
//     the engine waits for.
//
// Every term is a rule of DESIGN.md "Mechanisms" and "Attribution rules", applied to the run's arrival times and the records' cost draws,
// so no engine obeying the rules completes a record earlier: it is a lower
// bound, computed from the run's data.
func cascadeDone(log []pathRecord, sent []int64, r floorRule) [3][]int64 {
	n := len(log)
	var done [3][]int64
	if n == 0 {
		return done
	}
	// arr[x]: when x can have been fetched (the log is read in offset
	// order).
	arr, maxT := make([]int64, n), watermarks(log)
	a := int64(0)
	for x := range log {
		a = max(a, sent[x])
		arr[x] = a
	}
	// idleAt[x]: the end of the first quiet gap (> idle) from x on, which
	// follows record idleLast[x].
	idleAt, idleLast := make([]int64, n), make([]int, n)
	for x := n - 1; x >= 0; x-- {
		if x == n-1 || arr[x+1]-arr[x] > int64(r.idle) {
			idleAt[x], idleLast[x] = arr[x]+int64(r.idle), x
		} else {
			idleAt[x], idleLast[x] = idleAt[x+1], idleLast[x+1]
		}
	}
	// qOf(x): j, the offset whose arrival makes q(t+lateness) known (n: none).
	qOf := func(x int) int {
		j := firstAbove(maxT, log[x].t+int64(r.lateness))
		return j
	}
	offs := map[string][]int{}
	if r.scope == chain.GateKey {
		for x := range log {
			offs[log[x].key] = append(offs[log[x].key], x)
		}
	}
	for k := range 3 {
		cur := make([]int64, n)
		// upTo(x, lim): when the leader completed what x's scope names at
		// offsets ≤ lim.
		var upTo func(x, lim int) int64
		var all []int64 // the leader's prefix maxima: everything ≤ y completed
		if k > 0 {
			prev := done[k-1]
			all = make([]int64, n)
			for y := range prev {
				all[y] = prev[y]
				if y > 0 {
					all[y] = max(all[y], all[y-1])
				}
			}
			if r.scope == chain.GateKey {
				km := newKeyMax(offs, prev)
				upTo = func(x, lim int) int64 { return km.upTo(log[x].key, lim) }
			} else {
				upTo = func(_, lim int) int64 { return all[min(lim, n-1)] }
			}
		}
		last := map[string]int64{}
		for x := range log {
			rec := &log[x]
			processing := rec.valid && !rec.dup && rec.stage == k
			start := arr[x]
			if k > 0 {
				lim := min(int64(x)+r.distance, int64(n-1))
				open, noQ := int64(0), false
				if processing {
					if j := qOf(x); j < n {
						lim = max(lim, int64(j))
						open = arr[j]
					} else {
						noQ = true
					}
				}
				// The idle release: the partition quiet for idle and the
				// leader done with everything that arrived.
				idleOpen := max(idleAt[x], all[idleLast[x]])
				if noQ {
					open = idleOpen
				} else {
					open = min(max(open, upTo(x, int(lim))), idleOpen)
				}
				start = max(start, open)
			}
			if processing {
				start = max(start, last[rec.key])
				cur[x] = start + int64(rec.cost)
				last[rec.key] = cur[x]
			} else {
				cur[x] = start
			}
		}
		done[k] = cur
	}
	return done
}

// cascadeFloors returns, for every acknowledged output of an input sent in
// [from, to] (unix ns), the cascaded floor under rule: the earliest completion cascadeDone allows at
// the output's own stage − when its input was sent, sorted.
func cascadeFloors(acks []ack, f *feeder, from, to int64, e *expectation, r floorRule) []time.Duration {
	cache := map[int32][3][]int64{}
	out := make([]time.Duration, 0, len(acks))
	for _, a := range acks {
		if fl, ok := cascadeFloor(a, f, from, to, e, r, cache); ok {
			out = append(out, fl)
		}
	}
	slices.Sort(out)
	return out
}

// cascadeFloor is one output's cascaded floor; cache holds cascadeDone per
// partition.
func cascadeFloor(a ack, f *feeder, from, to int64, e *expectation, r floorRule, cache map[int32][3][]int64) (time.Duration, bool) {
	p, o := a.src.partition, a.src.offset
	if int(p) >= len(f.sentAt) || int(p) >= len(e.paths) || o >= int64(len(f.sentAt[p])) || o >= int64(len(e.paths[p])) {
		return 0, false
	}
	if _, ok := e.outputs[a.src]; !ok {
		return 0, false
	}
	sent := f.sentAt[p][o].Load()
	if sent < from || sent > to {
		return 0, false
	}
	st := e.paths[p][o].stage
	if st < 0 || st > 2 {
		return 0, false
	}
	d, ok := cache[p]
	if !ok {
		s := make([]int64, len(f.sentAt[p]))
		for i := range s {
			s[i] = f.sentAt[p][i].Load()
		}
		d = cascadeDone(e.paths[p], s, r)
		cache[p] = d
	}
	return max(time.Duration(d[st][o]-sent), 0), true
}
