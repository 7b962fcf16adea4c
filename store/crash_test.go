package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// TestCrashPropertyI4 checks DESIGN I4 on random histories: 2–3 stages
// write random keys (some expiring) for random, out-of-order offsets,
// checkpoint at random positions with a rising eviction time, and crash at
// random points. After every crash the persisted state must equal applying,
// in the order they were made, exactly the writes whose offset is below
// their stage's persisted Next or in its persisted set of offsets completed
// above it (Checkpoint.Above, random here), then evicting what expired by the last
// eviction time; before it, every Get and every range read (Scan,
// ScanReverse, random bounds) must see the latest write of any stage (or
// its eviction, once that write is persisted).
func TestCrashPropertyI4(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		seeds := h.seeds
		if testing.Short() {
			seeds = min(seeds, 4)
		}
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				crashScenario(t, h, seed)
			})
		}
	})
}

type modelWrite struct {
	stage int
	off   int64
	key   string
	val   string
	exp   int64 // unix seconds, 0 = none
	del   bool
}

type modelEntry struct {
	val string
	exp int64
}

func crashScenario(t *testing.T, h *harness, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x14))
	partition := int32(seed)
	stages := []string{"s0", "s1", "s2"}[:2+rng.IntN(2)]
	keys := make([]string, 2+rng.IntN(6))
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}

	// base: the persisted state at the last crash; log: writes made since;
	// nexts: the last checkpointed positions (a stage only writes at or
	// above its own, as in the chain); ev: the last eviction time (the
	// chain's is non-decreasing).
	base := map[string]modelEntry{}
	var log []modelWrite
	nexts := make([]int64, len(stages))
	aboves := make([][]int64, len(stages))
	covered := func(stage int, off int64) bool {
		return off < nexts[stage] || slices.Contains(aboves[stage], off)
	}
	var ev int64
	checkpointed := false

	persistedModel := func() map[string]modelEntry {
		s := maps.Clone(base)
		for _, w := range log {
			switch {
			case !covered(w.stage, w.off):
			case w.del:
				delete(s, w.key)
			default:
				s[w.key] = modelEntry{w.val, w.exp}
			}
		}
		maps.DeleteFunc(s, func(_ string, e modelEntry) bool { return e.exp != 0 && e.exp <= ev })
		return s
	}
	// liveModel: what Get must return for key.
	liveModel := func(key string) (string, bool) {
		for i := len(log) - 1; i >= 0; i-- {
			if w := log[i]; w.key == key {
				if covered(w.stage, w.off) {
					break // persisted: maybe evicted since
				}
				return w.val, !w.del
			}
		}
		e, ok := persistedModel()[key]
		return e.val, ok
	}
	values := func(m map[string]modelEntry) map[string]string {
		out := make(map[string]string, len(m))
		for k, e := range m {
			out[k] = e.val
		}
		return out
	}
	checkGet := func(ps chain.PartitionStore, key string) {
		t.Helper()
		want, present := liveModel(key)
		requireGet(t, ps.Stage(rng.IntN(len(stages))), key, want, present)
	}
	// checkScan: a range read over random bounds, in a random direction,
	// sees exactly what Get sees for every key in the range.
	checkScan := func(ps chain.PartitionStore) {
		t.Helper()
		lo, hi := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]+"~"
		if rng.IntN(4) == 0 {
			lo, hi = "", ""
		}
		reverse := rng.IntN(2) == 0
		var want []string
		for _, k := range slices.Sorted(slices.Values(keys)) {
			if k < lo || (hi != "" && k >= hi) {
				continue
			}
			if v, ok := liveModel(k); ok {
				want = append(want, k+"="+v)
			}
		}
		if reverse {
			slices.Reverse(want)
		}
		require.Equal(t, want, scanAll(t, ps.Stage(rng.IntN(len(stages))), lo, hi, reverse), "scan [%q, %q) reverse=%v", lo, hi, reverse)
	}
	crash := func() chain.PartitionStore {
		t.Helper()
		h.crash(t)
		want := persistedModel()
		require.Equal(t, values(want), h.persisted(t, partition), "persisted state after crash")
		ps, err := h.store.OpenPartition(topic, partition, stages)
		require.NoError(t, err)
		got, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.Equal(t, checkpointed, ok)
		if ok {
			for i, cp := range got {
				require.Equal(t, nexts[i], cp.Next, "stage %d", i)
				require.Equal(t, aboves[i], cp.Above, "stage %d", i)
			}
		}
		for _, k := range keys {
			e, present := want[k]
			requireGet(t, ps.Stage(0), k, e.val, present)
		}
		base, log = want, nil
		checkScan(ps)
		return ps
	}

	ps, err := h.store.OpenPartition(topic, partition, stages)
	require.NoError(t, err)
	for step := range 300 {
		switch r := rng.IntN(100); {
		case r < 65: // a write
			w := modelWrite{
				stage: rng.IntN(len(stages)),
				key:   keys[rng.IntN(len(keys))],
				val:   fmt.Sprintf("v%d", step),
				del:   rng.IntN(5) == 0,
			}
			w.off = nexts[w.stage] + rng.Int64N(12)
			if covered(w.stage, w.off) {
				continue // complete: the chain writes nothing more for it
			}
			ss := ps.Stage(w.stage)
			if w.del {
				require.NoError(t, ss.Delete(w.off, []byte(w.key)))
			} else {
				var exp time.Time
				if rng.IntN(2) == 0 {
					w.exp = max(1, ev+rng.Int64N(20)-5)
					exp = time.Unix(w.exp, 0)
				}
				require.NoError(t, ss.Set(w.off, []byte(w.key), []byte(w.val), exp))
			}
			log = append(log, w)
			checkGet(ps, w.key)
		case r < 85: // a checkpoint at random new positions
			cps := make([]commit.Checkpoint, len(stages))
			for i := range stages {
				nexts[i] += rng.Int64N(8)
				// The set only grows (offsets leave it below Next): a
				// carried record is complete.
				// A position is never a completed offset: it passes
				// the carried ones it reaches.
				for slices.Contains(aboves[i], nexts[i]) {
					nexts[i]++
				}
				above := slices.DeleteFunc(aboves[i], func(o int64) bool { return o < nexts[i] })
				for range rng.IntN(3) {
					above = append(above, nexts[i]+1+rng.Int64N(11))
				}
				slices.Sort(above)
				if above = slices.Compact(above); len(above) == 0 {
					above = nil
				}
				aboves[i] = above
				cps[i] = commit.Checkpoint{Stage: stages[i], Next: nexts[i], Watermark: rng.Int64(), Above: slices.Clone(above)}
			}
			ev += rng.Int64N(4)
			require.NoError(t, ps.Checkpoint(cps, time.Unix(ev, 0)))
			checkpointed = true
		case r < 91:
			checkGet(ps, keys[rng.IntN(len(keys))])
		case r < 97:
			checkScan(ps)
		default:
			ps = crash()
		}
	}
	crash()
}
