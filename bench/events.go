package bench

import (
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// events logs a design run's checkpoints (synced state writes, with the
// partitions each covered) and acknowledged commits, with their times, so
// that the report can say how many fell inside the measured window.
type events struct {
	mu      sync.Mutex
	syncs   []syncEvent
	commits []int64 // unix ns
}

type syncEvent struct {
	at    int64 // unix ns
	parts []int32
}

func (e *events) synced(parts ...int32) {
	now := time.Now().UnixNano()
	e.mu.Lock()
	e.syncs = append(e.syncs, syncEvent{now, parts})
	e.mu.Unlock()
}

func (e *events) committed() {
	now := time.Now().UnixNano()
	e.mu.Lock()
	e.commits = append(e.commits, now)
	e.mu.Unlock()
}

// window counts what happened in [from, to] (unix ns): synced writes,
// acknowledged commits, and the most and fewest checkpoints one of the
// partitions got (of partitions, which got one or more; 0 if none did).
func (e *events) window(from, to int64, partitions int) (syncs, commits, most, fewest int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	per := make([]int, partitions)
	for _, s := range e.syncs {
		if s.at < from || s.at > to {
			continue
		}
		syncs++
		for _, p := range s.parts {
			if int(p) < partitions {
				per[p]++
			}
		}
	}
	for _, c := range e.commits {
		if c >= from && c <= to {
			commits++
		}
	}
	fewest = -1
	for _, n := range per {
		most = max(most, n)
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return syncs, commits, most, max(fewest, 0)
}

// countingStore wraps the chain's store to log its checkpoints.
type countingStore struct {
	chain.Store
	ev *events
}

func (s countingStore) OpenPartition(topic string, partition int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.Store.OpenPartition(topic, partition, stages)
	if err != nil {
		return nil, err
	}
	if cs, ok := ps.(chain.ChangelogStore); ok {
		// Keep what a chain with a changelog needs (a variant may use one).
		return countingChangelogPartition{cs, countingPartition{ps, partition, s.ev}}, nil
	}
	return countingPartition{ps, partition, s.ev}, nil
}

// countingChangelogPartition is countingPartition for a store that can
// follow a changelog: a prepared checkpoint counts when it commits.
type countingChangelogPartition struct {
	chain.ChangelogStore
	c countingPartition
}

func (p countingChangelogPartition) Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error {
	return p.c.Checkpoint(cps, evictBefore)
}

func (p countingChangelogPartition) PrepareCheckpoint(cps []commit.Checkpoint, evictBefore time.Time) (chain.PreparedCheckpoint, error) {
	pc, err := p.ChangelogStore.PrepareCheckpoint(cps, evictBefore)
	if err != nil {
		return nil, err
	}
	return countingPrepared{pc, p.c}, nil
}

type countingPrepared struct {
	chain.PreparedCheckpoint
	c countingPartition
}

func (p countingPrepared) Commit(changelogOffset int64) error {
	if err := p.PreparedCheckpoint.Commit(changelogOffset); err != nil {
		return err
	}
	p.c.ev.synced(p.c.partition)
	return nil
}

type countingPartition struct {
	chain.PartitionStore
	partition int32
	ev        *events
}

func (p countingPartition) Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error {
	if err := p.PartitionStore.Checkpoint(cps, evictBefore); err != nil {
		return err
	}
	p.ev.synced(p.partition)
	return nil
}

// KeepHistory forwards chain.HistoryKeeper (the attribution chain keeps
// no versions for reads as of a horizon).
func (p countingPartition) KeepHistory(keep bool) {
	if hk, ok := p.PartitionStore.(chain.HistoryKeeper); ok {
		hk.KeepHistory(keep)
	}
}

// KeepHistory forwards chain.HistoryKeeper.
func (p countingChangelogPartition) KeepHistory(keep bool) { p.c.KeepHistory(keep) }

// EvictPrivate forwards chain.PrivateEvicter (the attribution chain's
// deduplication keys are private to their stages).
func (p countingPartition) EvictPrivate(prefixes [][]string) {
	if pe, ok := p.PartitionStore.(chain.PrivateEvicter); ok {
		pe.EvictPrivate(prefixes)
	}
}

// EvictPrivate forwards chain.PrivateEvicter.
func (p countingChangelogPartition) EvictPrivate(prefixes [][]string) { p.c.EvictPrivate(prefixes) }
