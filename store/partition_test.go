package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
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
		if testing.Short() || raceEnabled {
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
