package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/commit"
)

func TestReadYourWritesAcrossStages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		s0, s1, s2 := ps.Stage(0), ps.Stage(1), ps.Stage(2)

		requireGet(t, s1, "u1", "", false)
		set(t, s0, 1, "u1", "click")
		requireGet(t, s1, "u1", "click", true)
		requireGet(t, s2, "u1", "click", true)
		set(t, s1, 0, "u1", "install") // later write, lower offset: still the latest
		requireGet(t, s0, "u1", "install", true)
		del(t, s2, 0, "u1")
		requireGet(t, s0, "u1", "", false)

		// Persisted values read the same.
		set(t, s0, 2, "u2", "v2")
		require.NoError(t, ps.Checkpoint(cps(stages3, 3, 3, 3), time.Time{}))
		requireGet(t, s2, "u2", "v2", true)
		requireGet(t, s2, "u1", "", false)

		// An empty value is present.
		set(t, s0, 3, "empty", "")
		requireGet(t, s1, "empty", "", true)
		require.NoError(t, ps.Checkpoint(cps(stages3, 4, 4, 4), time.Time{}))
		requireGet(t, s1, "empty", "", true)
	})
}

func TestGetValueIsNotClobberedByAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		set(t, ps.Stage(0), 0, "k", "abc")
		v, _, err := ps.Stage(1).Get([]byte("k"))
		require.NoError(t, err)
		_ = append(v, 'X')
		requireGet(t, ps.Stage(1), "k", "abc", true)
	})
}

func TestPendingWritesDoNotSurviveRestart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		set(t, ps.Stage(0), 0, "a", "1")
		h.crash(t)

		ps = h.open(t, 0, stages3)
		requireGet(t, ps.Stage(0), "a", "", false)
		_, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.False(t, ok)

		set(t, ps.Stage(0), 0, "a", "1")
		set(t, ps.Stage(1), 0, "b", "2") // stage 1 Next stays 0: pending
		require.NoError(t, ps.Checkpoint(cps(stages3, 1, 0, 0), time.Time{}))
		h.crash(t)

		ps = h.open(t, 0, stages3)
		requireGet(t, ps.Stage(0), "a", "1", true)
		requireGet(t, ps.Stage(0), "b", "", false)
		got, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, cps(stages3, 1, 0, 0), got)
	})
}

func TestCheckpointPersistsExactlyWritesBelowNext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		ps := h.open(t, 0, st)
		s := ps.Stage(0)
		// Key-parallel stage: records complete out of order.
		set(t, s, 5, "k5", "v5")
		set(t, s, 3, "k3", "v3")
		set(t, s, 7, "k7", "v7")

		require.NoError(t, ps.Checkpoint(cps(st, 6), time.Time{}))
		require.Equal(t, map[string]string{"k5": "v5", "k3": "v3"}, h.persisted(t, 0))
		requireGet(t, s, "k7", "v7", true) // still pending, still visible

		require.NoError(t, ps.Checkpoint(cps(st, 8), time.Time{}))
		require.Equal(t, map[string]string{"k5": "v5", "k3": "v3", "k7": "v7"}, h.persisted(t, 0))

		h.crash(t)
		ps = h.open(t, 0, st)
		requireGet(t, ps.Stage(0), "k7", "v7", true)
	})
}

func TestWritesToOneKeyKeepTheirOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a", "b"}
		ps := h.open(t, 0, st)
		a, b := ps.Stage(0), ps.Stage(1)

		// Same stage, same batch: the last write wins.
		set(t, a, 1, "k", "1")
		set(t, a, 3, "k", "3")
		set(t, a, 2, "k", "2")
		del(t, a, 2, "d")
		set(t, a, 2, "d", "again")
		require.NoError(t, ps.Checkpoint(cps(st, 4, 0), time.Time{}))
		require.Equal(t, map[string]string{"k": "2", "d": "again"}, h.persisted(t, 0))

		// Across stages in one batch: the order made, not the stage order.
		set(t, b, 0, "x", "from-b")
		set(t, a, 4, "x", "from-a")
		require.NoError(t, ps.Checkpoint(cps(st, 5, 1), time.Time{}))
		require.Equal(t, "from-a", h.persisted(t, 0)["x"])

		// Across batches: b's older write, persisted after a's newer one,
		// must not move the key back in time.
		set(t, b, 10, "y", "old-from-b")
		set(t, a, 10, "y", "new-from-a")
		require.NoError(t, ps.Checkpoint(cps(st, 11, 1), time.Time{}))
		require.Equal(t, "new-from-a", h.persisted(t, 0)["y"])
		requireGet(t, a, "y", "new-from-a", true)
		require.NoError(t, ps.Checkpoint(cps(st, 11, 11), time.Time{}))
		require.Equal(t, "new-from-a", h.persisted(t, 0)["y"])
		requireGet(t, b, "y", "new-from-a", true)

		h.crash(t)
		ps = h.open(t, 0, st)
		requireGet(t, ps.Stage(0), "y", "new-from-a", true)
		requireGet(t, ps.Stage(0), "x", "from-a", true)
	})
}

func TestEviction(t *testing.T) {
	at := func(hh int) time.Time { return time.Date(2026, 11, 29, hh, 0, 0, 0, time.UTC) }
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s", "f"}
		ps := h.open(t, 0, st)
		s, f := ps.Stage(0), ps.Stage(1)

		setExp(t, s, 0, "e1", "v", at(1))
		setExp(t, s, 1, "e2", "v", at(2))
		setExp(t, s, 2, "e3", "v", at(3))
		set(t, s, 3, "forever", "v")
		setExp(t, s, 4, "rewritten", "v1", at(1))
		setExp(t, s, 5, "deleted", "v", at(1))
		require.NoError(t, ps.Checkpoint(cps(st, 6, 0), time.Time{}))
		require.Len(t, h.persisted(t, 0), 6)

		setExp(t, s, 6, "rewritten", "v2", at(3)) // stale index entry at 1:00 remains
		del(t, s, 7, "deleted")
		setExp(t, s, 8, "fresh", "v", at(1)) // expired already in its own batch
		require.NoError(t, ps.Checkpoint(cps(st, 9, 0), at(2)))

		require.Equal(t, map[string]string{"e3": "v", "forever": "v", "rewritten": "v2"}, h.persisted(t, 0))
		require.ElementsMatch(t, []string{"e3@03:00", "rewritten@03:00"}, h.indexEntries(t, 0))
		requireGet(t, f, "e1", "", false)
		requireGet(t, f, "fresh", "", false)
		requireGet(t, f, "rewritten", "v2", true)

		// A newer pending write survives the eviction of the persisted entry.
		setExp(t, s, 9, "e3", "newer", at(5))
		require.NoError(t, ps.Checkpoint(cps(st, 9, 0), at(4)))
		requireGet(t, f, "e3", "newer", true)
		require.NotContains(t, h.persisted(t, 0), "e3")

		// An evicted key whose latest write is persisted reads as absent
		// even while an older write of another stage to it is pending (and
		// that older write is not persisted later).
		set(t, f, 0, "z", "older")
		setExp(t, s, 10, "z", "newer", at(1))
		require.NoError(t, ps.Checkpoint(cps(st, 11, 0), at(4)))
		requireGet(t, s, "z", "", false)
		require.NoError(t, ps.Checkpoint(cps(st, 11, 1), at(4)))
		requireGet(t, s, "z", "", false)
		require.NotContains(t, h.persisted(t, 0), "z")

		h.crash(t)
		ps = h.open(t, 0, st)
		requireGet(t, ps.Stage(0), "e3", "newer", true) // checkpointed with Next 11
		requireGet(t, ps.Stage(0), "z", "", false)
		requireGet(t, ps.Stage(0), "rewritten", "", false) // expired at 3:00
		requireGet(t, ps.Stage(0), "forever", "v", true)
	})
}

// An entry that expired before an earlier eviction but was persisted by a
// checkpoint that did not evict is evicted by the next one that does.
func TestEvictionOfEntriesPersistedWithoutEviction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		ps := h.open(t, 0, st)
		setExp(t, ps.Stage(0), 0, "a", "v", time.Unix(5, 0))
		require.NoError(t, ps.Checkpoint(cps(st, 1), time.Unix(10, 0)))
		require.Empty(t, h.persisted(t, 0))

		setExp(t, ps.Stage(0), 1, "b", "v", time.Unix(5, 0))
		require.NoError(t, ps.Checkpoint(cps(st, 2), time.Time{}))
		require.Contains(t, h.persisted(t, 0), "b")
		require.NoError(t, ps.Checkpoint(cps(st, 2), time.Unix(10, 0)))
		require.Empty(t, h.persisted(t, 0))
		require.Empty(t, h.indexEntries(t, 0))
	})
}

func TestEvictionIsBoundedPerCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		ps := h.open(t, 0, st)
		for i := range 5 {
			setExp(t, ps.Stage(0), int64(i), fmt.Sprint("k", i), "v", time.Unix(100, 0))
		}
		require.NoError(t, ps.Checkpoint(cps(st, 5), time.Time{}))
		ps.(*partitionStore).evictLimit = 2
		for _, want := range []int{3, 1, 0} {
			require.NoError(t, ps.Checkpoint(cps(st, 5), time.Unix(200, 0)))
			require.Len(t, h.persisted(t, 0), want)
		}
		require.Empty(t, h.indexEntries(t, 0))
	})
}

func TestReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		other := h.open(t, 1, stages3)
		setExp(t, ps.Stage(0), 0, "a", "1", time.Unix(1000, 0))
		set(t, other.Stage(0), 0, "a", "other")
		require.NoError(t, ps.Checkpoint(cps(stages3, 1, 1, 1), time.Time{}))
		require.NoError(t, other.Checkpoint(cps(stages3, 1, 1, 1), time.Time{}))
		set(t, ps.Stage(1), 1, "b", "pending")
		require.Equal(t, 4, h.allKeys(t, 0)) // entry, 3 checkpoints
		require.Len(t, h.indexEntries(t, 0), 1)

		require.NoError(t, ps.Reset())
		require.Zero(t, h.allKeys(t, 0))
		requireGet(t, ps.Stage(0), "a", "", false)
		requireGet(t, ps.Stage(0), "b", "", false)
		_, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.False(t, ok)
		// A checkpoint after Reset persists nothing of before it.
		require.NoError(t, ps.Checkpoint(cps(stages3, 2, 2, 2), time.Time{}))
		require.Empty(t, h.persisted(t, 0))

		requireGet(t, other.Stage(0), "a", "other", true)
		require.Equal(t, map[string]string{"a": "other"}, h.persisted(t, 1))
	})
}

func TestCloseAndReopen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		_, err := h.store.OpenPartition(topic, 0, stages3)
		require.ErrorIs(t, err, ErrPartitionOpen)

		set(t, ps.Stage(0), 0, "a", "1")
		require.NoError(t, ps.Checkpoint(cps(stages3, 1, 0, 0), time.Time{}))
		set(t, ps.Stage(0), 1, "b", "pending")
		require.NoError(t, ps.Close())
		require.NoError(t, ps.Close()) // idempotent

		_, _, err = ps.Stage(0).Get([]byte("a"))
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, ps.Stage(0).Set(2, []byte("c"), nil, time.Time{}), ErrClosed)
		require.ErrorIs(t, ps.Stage(0).Delete(2, []byte("c")), ErrClosed)
		require.ErrorIs(t, ps.Checkpoint(cps(stages3, 2, 2, 2), time.Time{}), ErrClosed)
		require.ErrorIs(t, ps.Reset(), ErrClosed)
		_, _, err = ps.Checkpoints()
		require.ErrorIs(t, err, ErrClosed)

		ps = h.open(t, 0, stages3)
		requireGet(t, ps.Stage(0), "a", "1", true)
		requireGet(t, ps.Stage(0), "b", "", false)

		// A clean restart of the whole store sees the same.
		set(t, ps.Stage(0), 1, "b", "pending")
		h.restart(t)
		_, _, err = ps.Stage(0).Get([]byte("a"))
		require.ErrorIs(t, err, ErrClosed, "closing the store closes its partitions")
		ps = h.open(t, 0, stages3)
		requireGet(t, ps.Stage(0), "a", "1", true)
		requireGet(t, ps.Stage(0), "b", "", false)
	})
}

func TestPartitionsAreIsolated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		type part struct {
			topic string
			p     int32
		}
		parts := []part{{"t", 1}, {"t", 2}, {"t1", 1}, {"t", 256}}
		stores := make([]*partitionStore, len(parts))
		for i, pt := range parts {
			ps, err := h.store.OpenPartition(pt.topic, pt.p, st)
			require.NoError(t, err)
			stores[i] = ps.(*partitionStore)
			setExp(t, ps.Stage(0), 0, "k", fmt.Sprint("v", i), time.Unix(int64(100*(i+1)), 0))
		}
		requireGet(t, stores[1].Stage(0), "k", "v1", true)
		for _, ps := range stores {
			require.NoError(t, ps.Checkpoint(cps(st, 1), time.Time{}))
		}
		// Eviction and Reset in one partition touch no other.
		require.NoError(t, stores[0].Checkpoint(cps(st, 1), time.Unix(1000, 0)))
		require.NoError(t, stores[2].Reset())
		want := []string{"", "v1", "", "v3"}
		for i, ps := range stores {
			requireGet(t, ps.Stage(0), "k", want[i], want[i] != "")
		}
		_, ok, err := stores[0].Checkpoints()
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = stores[2].Checkpoints()
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func TestCheckpointsWhenStagesChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ab := []string{"a", "b"}
		ps := h.open(t, 0, ab)
		in := []commit.Checkpoint{{Stage: "a", Next: 7, Watermark: -5}, {Stage: "b", Next: 3, Watermark: 1 << 62}}
		require.NoError(t, ps.Checkpoint(in, time.Time{}))
		got, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, in, got)
		require.NoError(t, ps.Close())

		ps = h.open(t, 0, []string{"a", "b", "c"})
		_, ok, err = ps.Checkpoints()
		require.NoError(t, err)
		require.False(t, ok, "a stage without a persisted checkpoint")
		require.NoError(t, ps.Close())

		ps = h.open(t, 0, []string{"b"})
		got, ok, err = ps.Checkpoints()
		require.NoError(t, err)
		require.True(t, ok, "a removed stage is ignored")
		require.Equal(t, in[1:], got)
	})
}

func TestInvalidArguments(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		for _, bad := range []struct {
			topic  string
			p      int32
			stages []string
		}{
			{"a/b", 0, stages3}, {"", 0, stages3}, {"t", -1, stages3},
			{"t", 0, nil}, {"t", 0, []string{"a", "a"}}, {"t", 0, []string{""}},
		} {
			_, err := h.store.OpenPartition(bad.topic, bad.p, bad.stages)
			require.ErrorIs(t, err, ErrInvalid, "%+v", bad)
		}
		ps := h.open(t, 0, stages3)
		require.ErrorIs(t, ps.Checkpoint(cps(stages3[:2], 1, 1), time.Time{}), ErrInvalid)
		wrong := cps(stages3, 1, 1, 1)
		wrong[1].Stage = "other"
		err := ps.Checkpoint(wrong, time.Time{})
		require.ErrorIs(t, err, ErrInvalid)
		var se *Error
		require.True(t, errors.As(err, &se))
		require.Equal(t, Error{Topic: topic, Partition: 0, Op: "checkpoint", Err: se.Err}, *se)
		require.Panics(t, func() { ps.Stage(3) })
	})
}

// failingBackend makes every batch commit fail without applying it.
type failingBackend struct {
	backend
	mu   sync.Mutex
	fail bool
}

func (f *failingBackend) newBatch() batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return failingBatch{f.backend.newBatch()}
	}
	return f.backend.newBatch()
}

func (f *failingBackend) newBatchSized(int) batch { return f.newBatch() }

type failingBatch struct{ batch }

var errInjected = errors.New("injected commit failure")

func (b failingBatch) commit() error { b.discard(); return errInjected }

func TestFailedCheckpointKeepsWritesPending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		fb := &failingBackend{backend: h.engine().be}
		h.engine().be = fb
		st := []string{"s"}
		ps := h.open(t, 0, st)
		set(t, ps.Stage(0), 0, "a", "1")

		fb.fail = true
		require.ErrorIs(t, ps.Checkpoint(cps(st, 1), time.Time{}), errInjected)
		require.Empty(t, h.persisted(t, 0))
		requireGet(t, ps.Stage(0), "a", "1", true)

		fb.fail = false
		require.NoError(t, ps.Checkpoint(cps(st, 1), time.Time{}))
		require.Equal(t, map[string]string{"a": "1"}, h.persisted(t, 0))
	})
}

func TestOverlayHoldsOnlyPendingKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a", "b"}
		ps := h.open(t, 0, st).(*partitionStore)
		for i := range 100 {
			set(t, ps.Stage(i%2), int64(i), fmt.Sprint("k", i%10), "v")
		}
		overlay := func() (keys, pending int) {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			for _, l := range ps.mu.pending {
				pending += len(l)
			}
			return len(ps.mu.overlay), pending
		}
		keys, pending := overlay()
		assert.Equal(t, 10, keys)
		assert.Equal(t, 100, pending)

		// Below 50 for both stages: keys k0..k9 all have writes >= 50 left.
		require.NoError(t, ps.Checkpoint(cps(st, 50, 50), time.Time{}))
		keys, pending = overlay()
		assert.Equal(t, 10, keys)
		assert.Equal(t, 50, pending)

		require.NoError(t, ps.Checkpoint(cps(st, 100, 100), time.Time{}))
		keys, pending = overlay()
		assert.Zero(t, keys)
		assert.Zero(t, pending)
		requireGet(t, ps.Stage(0), "k3", "v", true)
	})
}

// TestConcurrentUse runs stages and a checkpointer concurrently (for -race)
// and checks the result once everything is checkpointed.
func TestConcurrentUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		const writers, perWriter = 4, 200
		ps := h.open(t, 0, stages3)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		ckptDone := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					ckptDone <- nil
					return
				default:
				}
				// Next 0: exercise the checkpoint path concurrently
				// without persisting anything yet.
				if err := ps.Checkpoint(cps(stages3, 0, 0, 0), time.Unix(1, 0)); err != nil {
					ckptDone <- err
					return
				}
			}
		}()
		for s := range stages3 {
			for w := range writers {
				wg.Go(func() {
					ss := ps.Stage(s)
					for i := range perWriter {
						key := []byte(fmt.Sprintf("s%d-w%d-%d", s, w, i))
						if err := ss.Set(int64(i), key, key, time.Time{}); err != nil {
							t.Error(err)
							return
						}
						if v, ok, err := ss.Get(key); err != nil || !ok || string(v) != string(key) {
							t.Errorf("Get(%s) = %q, %v, %v", key, v, ok, err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(stop)
		require.NoError(t, <-ckptDone)
		require.NoError(t, ps.Checkpoint(cps(stages3, perWriter, perWriter, perWriter), time.Time{}))
		h.crash(t)
		require.Len(t, h.persisted(t, 0), len(stages3)*writers*perWriter)
	})
}

func TestEntriesListsPersistedState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, []string{"a"})
		require.NoError(t, ps.Stage(0).Set(1, []byte("x"), []byte("1"), time.Time{}))
		require.NoError(t, ps.Stage(0).Set(2, []byte("y"), []byte("2"), time.Time{}))
		require.NoError(t, ps.Checkpoint([]commit.Checkpoint{{Stage: "a", Next: 2}}, time.Time{}))
		got, err := h.engine().Entries(topic, 0)
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"x": []byte("1")}, got, "only the write below the checkpoint is persisted")
		other, err := h.engine().Entries(topic, 1)
		require.NoError(t, err)
		require.Empty(t, other)
	})
}

// TestReadsBetweenOverlayChunks: a checkpoint's persisted keys leave the
// overlay in chunks with mu released between them; at every such point
// each key reads its latest value (by Get and by scans both ways), and a
// write made there is read back and persisted by the next checkpoint.
func TestReadsBetweenOverlayChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		ps := h.open(t, 0, st).(*partitionStore)
		s := ps.Stage(0)
		n := 3*persistChunk + 17
		want := map[string]string{}
		for i := range n {
			k := fmt.Sprintf("k%05d", i)
			set(t, s, int64(i), k, "v1")
			want[k] = "v1"
		}
		// Writes above the checkpoint stay pending throughout.
		for i := range 10 {
			k := fmt.Sprintf("k%05d", i*7)
			set(t, s, int64(n+i), k, "v2")
			want[k] = "v2"
		}
		next := int64(n + 10)
		check := func() {
			t.Helper()
			for k, v := range want {
				requireGet(t, s, k, v, true)
			}
			for _, reverse := range []bool{false, true} {
				got := map[string]string{}
				scan := s.Scan
				if reverse {
					scan = s.ScanReverse
				}
				require.NoError(t, scan([]byte("k"), nil, func(key, value []byte) bool {
					got[string(key)] = string(value)
					return true
				}))
				require.Equal(t, want, got, "reverse %v", reverse)
			}
		}
		calls := 0
		ps.betweenChunks = func() {
			calls++
			check()
			k := fmt.Sprintf("k%05d", calls*100)
			set(t, s, next, k, fmt.Sprint("between", calls))
			want[k] = fmt.Sprint("between", calls)
			next++
			check()
		}
		check() // leaves iterators cached at the generation before the checkpoint
		require.NoError(t, ps.Checkpoint(cps(st, int64(n)), time.Time{}))
		require.Equal(t, 3, calls, "chunks of %d among %d persisted writes", persistChunk, n)
		ps.betweenChunks = nil
		check()
		require.NoError(t, ps.Checkpoint(cps(st, next), time.Time{}))
		check()
		require.Equal(t, want, h.persisted(t, 0))
		ps.mu.Lock()
		overlay, pending := len(ps.mu.overlay), len(ps.mu.pending[0])
		ps.mu.Unlock()
		require.Zero(t, overlay)
		require.Zero(t, pending)
	})
}
