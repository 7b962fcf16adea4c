package store

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// asOf reads key as stage ss at horizon h: "" and false when absent.
func asOf(t *testing.T, ss chain.StageState, h int64, key string) string {
	t.Helper()
	v, ok, err := ss.GetAsOf(h, []byte(key))
	require.NoError(t, err)
	if !ok {
		return "<absent>"
	}
	return string(v)
}

func scanAsOf(t *testing.T, ss chain.StageState, h int64, reverse bool) []string {
	t.Helper()
	var out []string
	require.NoError(t, ss.ScanAsOf(h, nil, nil, reverse, func(k, v []byte) bool {
		out = append(out, string(k)+"="+string(v))
		return true
	}))
	return out
}

// TestReadsAsOfHorizonSurviveCheckpointCrashAndRestore is the as-of read
// invariant: a follower reading at horizon h sees its leaders' writes of
// records below h only — the value a key had before the leader's first
// write at or above h — while its leaders ran ahead, after the writes were
// checkpointed, after a crash and restart on the persisted state, and on a
// state rebuilt from the changelog (a move).
func TestReadsAsOfHorizonSurviveCheckpointCrashAndRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"lead", "follow"}
		ps := h.open(t, 0, st)
		lead, follow := ps.Stage(0), ps.Stage(1)
		set(t, lead, 2, "x", "x@2")
		set(t, lead, 3, "gone", "g@3")
		require.NoError(t, ps.Checkpoint(cps(st, 4, 4), time.Time{})) // settled: plain entries
		set(t, lead, 10, "x", "x@10")
		set(t, lead, 20, "x", "x@20")
		del(t, lead, 12, "gone")
		set(t, lead, 15, "new", "n@15")
		set(t, follow, 5, "own", "o@5") // the follower's own write

		check := func(ps chain.PartitionStore, what string) {
			t.Helper()
			follow := ps.Stage(1)
			for _, c := range []struct {
				h          int64
				x, gone, n string
			}{
				{5, "x@2", "g@3", "<absent>"},
				{11, "x@10", "g@3", "<absent>"},
				{13, "x@10", "<absent>", "<absent>"},
				{16, "x@10", "<absent>", "n@15"},
				{21, "x@20", "<absent>", "n@15"},
				{math.MaxInt64, "x@20", "<absent>", "n@15"},
			} {
				require.Equal(t, c.x, asOf(t, follow, c.h, "x"), "%s: x at %d", what, c.h)
				require.Equal(t, c.gone, asOf(t, follow, c.h, "gone"), "%s: gone at %d", what, c.h)
				require.Equal(t, c.n, asOf(t, follow, c.h, "new"), "%s: new at %d", what, c.h)
			}
			require.Equal(t, []string{"gone=g@3", "own=o@5", "x=x@10"}, scanAsOf(t, follow, 11, false), what)
			require.Equal(t, []string{"x=x@10", "own=o@5", "new=n@15"}, scanAsOf(t, follow, 16, true), what)
			// The leader itself, and plain reads, see its latest writes.
			require.Equal(t, "x@20", asOf(t, ps.Stage(0), 11, "x"), what)
			requireGet(t, follow, "x", "x@20", true)
			requireGet(t, follow, "gone", "", false)
		}
		check(ps, "pending")

		// The leader's writes are checkpointed, the follower's position
		// stays at 5: the versions above it stay readable.
		cs := cps(st, 21, 6)
		require.NoError(t, ps.Checkpoint(cs, time.Time{}))
		check(ps, "checkpointed")
		require.NotEmpty(t, h.persistedHists(t, 0))
		require.NotContains(t, h.persisted(t, 0), histPrefix+"x", "histories are not user entries")

		h.crash(t)
		ps = h.open(t, 0, st)
		check(ps, "after a crash")

		// A state rebuilt from the changelog (a move) reads the same.
		m := NewMemory()
		moved, err := m.OpenPartition(topic, 0, st)
		require.NoError(t, err)
		snap := changelogStore(t, ps)
		var recs []chain.ChangelogRecord
		require.NoError(t, snap.Snapshot(func(rs []chain.ChangelogRecord) error {
			recs = append(recs, rs...)
			return nil
		}))
		mc := changelogStore(t, moved)
		require.NoError(t, mc.Restore(recs, int64(len(recs))))
		require.NoError(t, mc.FinishRestore(cs, int64(len(recs))))
		check(moved, "restored from the changelog")

		// Once the follower passes the versions, the histories go: the
		// next checkpoint deletes their entries and plain entries remain.
		require.NoError(t, ps.Checkpoint(cps(st, 21, 21), time.Time{}))
		require.Empty(t, h.persistedHists(t, 0))
		require.Equal(t, map[string]string{"x": "x@20", "new": "n@15", "own": "o@5"}, h.persisted(t, 0))
		require.Equal(t, "x@20", asOf(t, ps.Stage(1), 22, "x"))
	})
}

// TestUserKeysMustNotUseTheHistoryPrefix: the histories' key space is the
// store's own.
func TestUserKeysMustNotUseTheHistoryPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		err := ps.Stage(0).Set(0, []byte(histPrefix+"k"), []byte("v"), time.Time{})
		require.ErrorIs(t, err, ErrInvalid)
	})
}

// TestKeepNoHistory: a partition told to keep no history (a chain
// WithAsOfReads(false)) starts none, reads the latest writes at every horizon,
// and deletes the history entries an earlier run persisted.
func TestKeepNoHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"lead", "follow"}
		ps := h.open(t, 0, st)
		set(t, ps.Stage(0), 10, "x", "x@10")
		set(t, ps.Stage(0), 20, "x", "x@20")
		require.NoError(t, ps.Checkpoint(cps(st, 21, 5), time.Time{}))
		require.NotEmpty(t, h.persistedHists(t, 0))
		require.Equal(t, "<absent>", asOf(t, ps.Stage(1), 6, "x"))
		h.crash(t)

		ps = h.open(t, 0, st)
		ps.(chain.HistoryKeeper).KeepHistory(false)
		require.Equal(t, "x@20", asOf(t, ps.Stage(1), 6, "x"))
		set(t, ps.Stage(0), 21, "y", "y@21")
		require.Equal(t, "y@21", asOf(t, ps.Stage(1), 6, "y"))
		require.NoError(t, ps.Checkpoint(cps(st, 22, 5), time.Time{}))
		require.Empty(t, h.persistedHists(t, 0), "the earlier run's entries are deleted, none is written")
		require.Equal(t, map[string]string{"x": "x@20", "y": "y@21"}, h.persisted(t, 0))
	})
}
