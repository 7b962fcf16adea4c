package bench

import (
	"slices"
	"time"
)

// keyOrderPath is chainOrderPath under the key-scoped gate (chain.GateKey,
// the attribution chain's default): the time the last stage completes one
// partition's log with unlimited workers and no overhead, when a follower
// record (offset x, event time t, key u) waits only for its leader to have
// completed u's records at offsets ≤ x and, when the follower processes
// it, below q(t + lateness) — the first offset whose prefix maximum of
// event times exceeds t + lateness; without such an offset, for the
// leader's idle release: once it has completed everything, and no sooner
// than idle after the run's start (the engine releases IdleTimeout after
// the last record was appended, not after the leader's last completion:
// leaderEnd + idle would not be a lower bound). One key's records of a
// stage run in offset order; a skipped record costs nothing but
// completes only after its gate (positions stay contiguous). It is at most
// chainOrderPath (the key rule waits for a subset of what the partition
// rule waits for), and at least the longest key×stage chain.
func keyOrderPath(log []pathRecord, lateness, idle time.Duration) time.Duration {
	n := len(log)
	if n == 0 {
		return 0
	}
	maxT := watermarks(log)
	// Each key's offsets, in order.
	offs := map[string][]int{}
	for x := range log {
		offs[log[x].key] = append(offs[log[x].key], x)
	}
	prev := make([]time.Duration, n) // the leader's completion time per record
	cur := make([]time.Duration, n)
	for k := range 3 {
		// waitFor(u, limit) is when the leader has completed u's records
		// at offsets <= limit.
		waitFor := func(string, int) time.Duration { return 0 }
		leaderEnd := time.Duration(0)
		if k > 0 {
			waitFor = newKeyMax(offs, prev).upTo
			leaderEnd = slices.Max(prev)
		}
		last := map[string]time.Duration{}
		for x := range log {
			r := &log[x]
			gate := time.Duration(0)
			processing := r.valid && r.stage == k
			if k > 0 {
				gate = waitFor(r.key, x)
				if processing {
					need := r.t + int64(lateness)
					j := firstAbove(maxT, need)
					if j < n {
						// q = j+1: the leader's records of u at offsets <= j.
						gate = max(gate, waitFor(r.key, j))
					} else {
						gate = max(gate, leaderEnd, idle)
					}
				}
			}
			fin := gate
			if processing && !r.dup {
				fin = max(gate, last[r.key]) + r.cost
				last[r.key] = fin
			}
			cur[x] = fin
		}
		prev, cur = cur, prev
	}
	return slices.Max(prev)
}
