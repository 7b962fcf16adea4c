package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStateCacheBudgetChangesNoResult runs the same random history of
// writes, checkpoints with eviction, point and range reads, and restarts on
// a store whose state cache holds everything and on one whose budget is a
// few entries: every read must return the same, and the small budget must
// have dropped its partitions' mirrors (the large one none), so that both
// paths are what was compared.
func TestStateCacheBudgetChangesNoResult(t *testing.T) {
	seeds := uint64(6)
	if raceEnabled {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			big := newPebbleMemHarnessWith(t, WithStateCacheBytes(1<<30))
			small := newPebbleMemHarnessWith(t, WithStateCacheBytes(tinyCache))
			rng := rand.New(rand.NewPCG(seed, 0x27))
			st := []string{"a", "b"}
			hs := []*harness{big, small}
			open := func() []*partitionStore {
				out := make([]*partitionStore, len(hs))
				for i, h := range hs {
					out[i] = h.open(t, 0, st).(*partitionStore)
				}
				return out
			}
			ps := open()
			t0 := time.Unix(1_800_000_000, 0)
			nexts := []int64{0, 0}
			var ev time.Time
			read := func(p *partitionStore, lo, hi string, reverse bool) []string {
				var got []string
				require.NoError(t, p.scan([]byte(lo), []byte(hi), reverse, func(k, v []byte) bool {
					got = append(got, string(k)+"="+string(v))
					return true
				}))
				return got
			}
			droppedSmall := false
			for step := range 1500 {
				switch r := rng.IntN(40); {
				case r < 20:
					s := rng.IntN(2)
					off := nexts[s] + rng.Int64N(4)
					key := fmt.Sprintf("u%02d/%03d", rng.IntN(8), rng.IntN(50))
					val := fmt.Sprint("v", step)
					var exp time.Time
					if rng.IntN(2) == 0 {
						exp = t0.Add(time.Duration(rng.IntN(600)) * time.Second)
					}
					for _, p := range ps {
						require.NoError(t, p.Stage(s).Set(off, []byte(key), []byte(val), exp))
					}
				case r < 24:
					s := rng.IntN(2)
					key := fmt.Sprintf("u%02d/%03d", rng.IntN(8), rng.IntN(50))
					off := nexts[s] + rng.Int64N(4)
					for _, p := range ps {
						require.NoError(t, p.Stage(s).Delete(off, []byte(key)))
					}
				case r < 32:
					u := fmt.Sprintf("u%02d/", rng.IntN(8))
					lo, hi := u+fmt.Sprintf("%03d", rng.IntN(50)), u+"~"
					rev := rng.IntN(2) == 0
					require.Equal(t, read(ps[0], lo, hi, rev), read(ps[1], lo, hi, rev), "step %d: range read [%s, %s)", step, lo, hi)
					key := fmt.Sprintf("u%02d/%03d", rng.IntN(8), rng.IntN(50))
					v0, ok0, err := ps[0].Stage(0).Get([]byte(key))
					require.NoError(t, err)
					v1, ok1, err := ps[1].Stage(1).Get([]byte(key))
					require.NoError(t, err)
					require.Equal(t, ok0, ok1, "step %d: Get(%s)", step, key)
					require.Equal(t, string(v0), string(v1), "step %d: Get(%s)", step, key)
				case r < 38:
					for i := range nexts {
						nexts[i] += rng.Int64N(5)
					}
					if e := t0.Add(time.Duration(rng.IntN(600)) * time.Second); rng.IntN(2) == 0 && e.After(ev) {
						ev = e
					}
					for _, p := range ps {
						require.NoError(t, p.Checkpoint(cps(st, nexts...), ev))
					}
					require.Equal(t, big.persisted(t, 0), small.persisted(t, 0), "step %d: persisted state", step)
				default: // a clean restart: pending writes are dropped, positions go back
					for i, h := range hs {
						if !ps[i].be.(*mirrored).on() && i == 1 {
							droppedSmall = true
						}
						require.True(t, i == 1 || ps[i].be.(*mirrored).on(), "step %d: the large budget dropped a mirror", step)
						h.restart(t)
					}
					ps = open()
					got, ok, err := ps[0].Checkpoints()
					require.NoError(t, err)
					if ok {
						for i := range nexts {
							nexts[i] = got[i].Next
						}
					} else {
						nexts = []int64{0, 0}
					}
				}
			}
			if !ps[1].be.(*mirrored).on() {
				droppedSmall = true
			}
			require.True(t, droppedSmall, "the small budget never dropped a mirror: the test compared nothing")
			require.True(t, ps[0].be.(*mirrored).on())
		})
	}
}
