package store

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
