package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// TestCheckpointAllPersistsEveryPartition: after CheckpointAll and a crash,
// every partition's state and checkpoints are what its own Checkpoint would
// have persisted (writes below Next kept, later ones dropped), and
// evictions apply per partition.
func TestCheckpointAllPersistsEveryPartition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := []chain.PartitionStore{h.open(t, 0, stages3), h.open(t, 1, stages3), h.open(t, 2, stages3)}
		for i, p := range ps {
			set(t, p.Stage(0), 0, "a", "p"+string(rune('0'+i)))
			set(t, p.Stage(1), 5, "late", "pending") // above Next: stays pending
			setExp(t, p.Stage(0), 1, "old", "x", time.Unix(10, 0))
		}
		items := make([]PartitionCheckpoint, len(ps))
		for i, p := range ps {
			items[i] = PartitionCheckpoint{Store: p, Checkpoints: cps(stages3, 2, 2, 2)}
		}
		items[2].EvictBefore = time.Unix(20, 0) // only partition 2 evicts "old"
		require.NoError(t, CheckpointAll(items))
		h.crash(t)
		for i := range 3 {
			p := h.open(t, int32(i), stages3)
			got, ok, err := p.Checkpoints()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, cps(stages3, 2, 2, 2), got)
			requireGet(t, p.Stage(0), "a", "p"+string(rune('0'+i)), true)
			requireGet(t, p.Stage(0), "late", "", false)
			requireGet(t, p.Stage(0), "old", "x", i != 2)
		}
	})
}

// TestCheckpointAllIsAllOrNothing: when one partition's part cannot be
// prepared (here: a checkpoint for the wrong number of stages), nothing of
// any partition is persisted and every write stays pending, so the next
// checkpoint persists it.
func TestCheckpointAllIsAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		a, b := h.open(t, 0, stages3), h.open(t, 1, stages3)
		set(t, a.Stage(0), 0, "k", "a")
		set(t, b.Stage(0), 0, "k", "b")
		err := CheckpointAll([]PartitionCheckpoint{
			{Store: a, Checkpoints: cps(stages3, 1, 1, 1)},
			{Store: b, Checkpoints: []commit.Checkpoint{{Stage: "click", Next: 1}}},
		})
		require.ErrorIs(t, err, ErrInvalid, "the failing part's error")

		// Nothing persisted: a crash loses both writes...
		_, ok, err := a.Checkpoints()
		require.NoError(t, err)
		require.False(t, ok, "partition 0's part was not persisted either")
		// ...and both are still pending: a later checkpoint persists them.
		require.NoError(t, CheckpointAll([]PartitionCheckpoint{
			{Store: a, Checkpoints: cps(stages3, 1, 1, 1)},
			{Store: b, Checkpoints: cps(stages3, 1, 1, 1)},
		}))
		h.crash(t)
		requireGet(t, h.open(t, 0, stages3).Stage(0), "k", "a", true)
		requireGet(t, h.open(t, 1, stages3).Stage(0), "k", "b", true)
	})
}

// syncCountingBackend counts committed batches.
type syncCountingBackend struct {
	backend
	commits *int
}

func (c syncCountingBackend) newBatch() batch { return countingBatch{c.backend.newBatch(), c.commits} }

func (c syncCountingBackend) newBatchSized(int) batch { return c.newBatch() }

type countingBatch struct {
	batch
	commits *int
}

func (c countingBatch) commit() error { *c.commits++; return c.batch.commit() }

// TestCheckpointAllIsOneBatch: n partitions cost one batch commit (one
// sync), where Checkpoint per partition costs n.
func TestCheckpointAllIsOneBatch(t *testing.T) {
	commits := 0
	m := &Memory{}
	m.engine.init(syncCountingBackend{newMemBackend(), &commits})
	var items []PartitionCheckpoint
	for i := range 4 {
		p, err := m.OpenPartition(topic, int32(i), stages3)
		require.NoError(t, err)
		set(t, p.Stage(0), 0, "k", "v")
		items = append(items, PartitionCheckpoint{Store: p, Checkpoints: cps(stages3, 1, 1, 1)})
	}
	require.NoError(t, CheckpointAll(items))
	require.Equal(t, 1, commits)
	for _, it := range items {
		require.NoError(t, it.Store.Checkpoint(cps(stages3, 1, 1, 1), time.Time{}))
	}
	require.Equal(t, 1+len(items), commits)
}

func TestCheckpointAllRejects(t *testing.T) {
	m, other := NewMemory(), NewMemory()
	a, err := m.OpenPartition(topic, 0, stages3)
	require.NoError(t, err)
	b, err := other.OpenPartition(topic, 1, stages3)
	require.NoError(t, err)
	require.ErrorIs(t, CheckpointAll([]PartitionCheckpoint{{Store: a}, {Store: a}}), ErrInvalid)
	require.ErrorIs(t, CheckpointAll([]PartitionCheckpoint{{Store: a}, {Store: b}}), ErrInvalid)
	require.NoError(t, CheckpointAll(nil))
}
