package store

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// countingBackend counts point reads of the backend.
type countingBackend struct {
	*memBackend
	gets atomic.Int64
}

func (c *countingBackend) get(key []byte) ([]byte, bool, error) {
	c.gets.Add(1)
	return c.memBackend.get(key)
}

// TestGetOfNeverPersistedKeySkipsTheBackend: the key filter answers a Get of
// a key that was never persisted without reading the backend, and every
// persisted key still reads (after a checkpoint, and after a reopen, whose
// filter is built from the backend).
func TestGetOfNeverPersistedKeySkipsTheBackend(t *testing.T) {
	be := &countingBackend{memBackend: newMemBackend()}
	m := &Memory{}
	m.engine.init(be)
	ps, err := m.OpenPartition(topic, 0, stages3)
	require.NoError(t, err)
	ss := ps.Stage(0)
	for i := range 100 {
		set(t, ss, int64(i), fmt.Sprint("k", i), "v")
	}
	require.NoError(t, ps.Checkpoint(cps(stages3, 100, 100, 100), time.Time{}))
	be.gets.Store(0)
	misses := 0
	for i := range 1000 {
		requireGet(t, ss, fmt.Sprint("absent", i), "", false)
		misses++
	}
	require.Less(t, be.gets.Load(), int64(50), "backend reads for %d keys never written (~1%% false positives)", misses)
	for i := range 100 {
		requireGet(t, ss, fmt.Sprint("k", i), "v", true)
	}
	require.NoError(t, ps.Close())
	ps, err = m.OpenPartition(topic, 0, stages3)
	require.NoError(t, err)
	for i := range 100 {
		requireGet(t, ps.Stage(1), fmt.Sprint("k", i), "v", true)
	}
}

// TestFilterRebuild: with a tiny capacity the filter is rebuilt by many
// checkpoints; Gets and the crash property stay exact through it.
func TestFilterRebuild(t *testing.T) {
	defer func(c int64) { minFilterCapacity = c }(minFilterCapacity)
	minFilterCapacity = 4
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		for round := range 20 {
			for i := range 10 {
				off := int64(round*10 + i)
				set(t, ss, off, fmt.Sprint("k", round, "-", i), fmt.Sprint(off))
			}
			next := int64(round*10 + 10)
			require.NoError(t, ps.Checkpoint(cps(stages3, next, next, next), time.Time{}))
			for r := range round + 1 {
				for i := range 10 {
					requireGet(t, ss, fmt.Sprint("k", r, "-", i), fmt.Sprint(r*10+i), true)
				}
			}
		}
		for seed := range uint64(3) {
			crashScenario(t, h, 1000+seed)
		}
	})
}

// TestRestoreBuildsTheFilter: a restore into an empty partition outgrows
// its filter; FinishRestore leaves a filter with room, holding every
// restored key, and Gets stay exact (a restore into a partition with
// entries, or one whose filter took keys no batch kept, leaves the rebuild
// to the next checkpoint).
func TestRestoreBuildsTheFilter(t *testing.T) {
	defer func(c int64) { minFilterCapacity = c }(minFilterCapacity)
	minFilterCapacity = 4
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		cs := changelogStore(t, ps)
		var recs []chain.ChangelogRecord
		for i := range 100 {
			var v []byte
			if i%10 != 9 {
				v = changelogValue(appendValue(nil, 0, []byte(fmt.Sprint("v", i))))
			}
			recs = append(recs, chain.ChangelogRecord{Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i%90), Value: v})
		}
		for i := 0; i < len(recs); i += 25 {
			require.NoError(t, cs.Restore(recs[i:i+25], int64(i+25)))
		}
		require.NoError(t, cs.FinishRestore(cps(stages3, 0, 0, 0), 100))
		p := ps.(*partitionStore)
		f := p.filter.Load()
		require.False(t, f.full(), "FinishRestore built a filter with room")
		want := map[string]string{}
		for _, r := range recs {
			if r.Value == nil {
				delete(want, string(r.Key))
			} else {
				want[string(r.Key)] = string(r.Value[1+expiryLen:])
			}
		}
		for i := range 90 {
			k := fmt.Sprint("k", i)
			v, ok := want[k]
			requireGet(t, ps.Stage(0), k, v, ok)
			if ok {
				require.True(t, f.mayContain([]byte(k)), k)
			}
		}

		// An entry before the restore: the filter is left to the checkpoint.
		ps1 := h.open(t, 1, stages3)
		set(t, ps1.Stage(0), 0, "before", "x")
		require.NoError(t, ps1.Checkpoint(cps(stages3, 1, 1, 1), time.Time{}))
		cs1 := changelogStore(t, ps1)
		require.NoError(t, cs1.Restore(recs[:25], 25))
		f1 := ps1.(*partitionStore).filter.Load()
		require.True(t, f1.full())
		require.NoError(t, cs1.FinishRestore(cps(stages3, 0, 0, 0), 25))
		require.Same(t, f1, ps1.(*partitionStore).filter.Load())
		requireGet(t, ps1.Stage(0), "before", "x", true)
	})
}
