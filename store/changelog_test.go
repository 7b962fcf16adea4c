package store

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// rawEntries returns the persisted entries of partition with their stored
// encoding (expiry included), hex-encoded for readable diffs.
func rawEntries(t *testing.T, e *engine, partition int32) map[string]string {
	t.Helper()
	ks := newKeyspace(topic, partition)
	lo := appendTagged(nil, ks, entryTag, "")
	hi := appendTagged(nil, ks, entryTag+1, "")
	var keys [][]byte
	require.NoError(t, e.be.scan(lo, hi[:len(hi)-1], func(k []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}))
	out := map[string]string{}
	require.NoError(t, e.be.getSorted(keys, func(i int, v []byte) {
		out[string(keys[i][len(lo):])] = hex.EncodeToString(v)
	}))
	return out
}

// userRecords are the records of recs that are not histories' (asof.go).
func userRecords(recs []chain.ChangelogRecord) []chain.ChangelogRecord {
	var out []chain.ChangelogRecord
	for _, r := range recs {
		if !isHistKey(r.Key) {
			out = append(out, r)
		}
	}
	return out
}

func changelogStore(t *testing.T, ps chain.PartitionStore) chain.ChangelogStore {
	t.Helper()
	cs, ok := ps.(chain.ChangelogStore)
	require.True(t, ok, "%T implements chain.ChangelogStore", ps)
	return cs
}

// image rebuilds log[:n] into a fresh in-memory store and returns its
// entries; chunk sizes vary so that batch boundaries fall anywhere.
func image(t *testing.T, rng *rand.Rand, log []chain.ChangelogRecord, n int64, stages []string, cps []commit.Checkpoint) map[string]string {
	t.Helper()
	m := NewMemory()
	ps, err := m.OpenPartition(topic, 0, stages)
	require.NoError(t, err)
	cs := changelogStore(t, ps)
	for i := int64(0); i < n; {
		j := min(n, i+1+rng.Int64N(8))
		require.NoError(t, cs.Restore(log[i:j], j))
		i = j
	}
	require.NoError(t, cs.FinishRestore(cps, n))
	got, ok, err := cs.Checkpoints()
	require.NoError(t, err)
	require.Equal(t, cps != nil, ok)
	if ok {
		require.Equal(t, cps, got)
	}
	off, _, ok, err := cs.ChangelogOffset()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, n, off)
	return rawEntries(t, &m.engine, 0)
}

// TestChangelogIsTheStatesImage is the changelog invariant: after every
// committed checkpoint the persisted entries equal the changelog's records
// below the recorded offset applied in order — also when earlier attempts
// were aborted after appending part of their records (a failed append
// leaves them in the changelog), and across crashes. A checkpoint with a
// changelog offset is not synced, so a machine crash (pebble-memfs keeps
// only what was synced) may take the local state back to any earlier
// checkpoint: it must still be the image of the changelog below the offset
// it records, and catching up from there with the changelog's records up to
// the last committed offset (what the chain's restore does) must give the
// image at that offset. pebble-memfs must see such a catch-up at least once.
func TestChangelogIsTheStatesImage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		seeds := min(h.seeds, 60, h.seeds/4+2)
		if testing.Short() || raceEnabled {
			seeds = min(seeds, 4)
		}
		caughtUp := 0
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { caughtUp += imageScenario(t, h, seed) })
		}
		if _, ok := h.store.(*DB); ok && h.lossy {
			assert.Positive(t, caughtUp, "no crash lost an unsynced checkpoint: are changelog checkpoints still synced?")
		}
	})
}

// imageScenario runs one random history and returns how many crashes left
// the local state behind the last committed changelog offset.
func imageScenario(t *testing.T, h *harness, seed uint64) (caughtUp int) {
	rng := rand.New(rand.NewPCG(seed, 0x11))
	partition := int32(seed)
	stages := []string{"s0", "s1", "s2"}[:1+rng.IntN(3)]
	keys := make([]string, 2+rng.IntN(8))
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	t0 := time.Unix(1_800_000_000, 0)
	var log []chain.ChangelogRecord
	nexts := make([]int64, len(stages))
	var ev time.Time
	var lastCps []commit.Checkpoint
	hasOffset := false
	// committed: the offset of the last commit (what the group's commit
	// would carry); cpsAt: the checkpoints recorded with each offset.
	committed := int64(0)
	cpsAt := map[int64][]commit.Checkpoint{}
	ps := h.open(t, partition, stages)
	cs := changelogStore(t, ps)

	for step := range 300 {
		switch r := rng.IntN(20); {
		case r < 12: // a write by some stage at or above its position
			st := rng.IntN(len(stages))
			off := nexts[st] + rng.Int64N(5)
			key := keys[rng.IntN(len(keys))]
			switch rng.IntN(4) {
			case 0:
				del(t, ps.Stage(st), off, key)
			case 1:
				setExp(t, ps.Stage(st), off, key, fmt.Sprint("v", step), t0.Add(time.Duration(rng.IntN(60))*time.Second))
			default:
				set(t, ps.Stage(st), off, key, fmt.Sprint("v", step))
			}
		case r < 18: // a checkpoint
			for i := range nexts {
				nexts[i] += rng.Int64N(4)
			}
			if e := t0.Add(time.Duration(rng.IntN(60)) * time.Second); rng.IntN(3) == 0 && e.After(ev) {
				ev = e // never backwards, as the chain's (last stage's watermark)
			}
			cps := cps(stages, nexts...)
			pc, err := cs.PrepareCheckpoint(cps, ev)
			require.NoError(t, err)
			recs := pc.Records()
			if rng.IntN(4) == 0 {
				// The append failed part-way: a prefix is in the changelog.
				log = append(log, recs[:rng.IntN(len(recs)+1)]...)
				pc.Abort()
				continue
			}
			log = append(log, recs...)
			require.NoError(t, pc.Commit(int64(len(log))))
			lastCps, hasOffset = cps, true
			committed = int64(len(log))
			cpsAt[committed] = cps
			off, _, ok, err := cs.ChangelogOffset()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, int64(len(log)), off)
			require.Equal(t, image(t, rng, log, off, stages, cps), rawEntries(t, h.engine(), partition),
				"step %d: persisted state is the changelog's image", step)
		default: // a crash: pending writes are lost, positions go back
			h.crash(t)
			ps = h.open(t, partition, stages)
			cs = changelogStore(t, ps)
			got, ok, err := cs.Checkpoints()
			require.NoError(t, err)
			if ok {
				for i := range nexts {
					nexts[i] = got[i].Next
				}
			} else {
				clear(nexts)
			}
			off, _, ok, err := cs.ChangelogOffset()
			require.NoError(t, err)
			if !h.lossy {
				require.Equal(t, hasOffset, ok)
			}
			if ok {
				at, known := cpsAt[off]
				require.True(t, known, "step %d: local changelog offset %d is none that a checkpoint recorded", step, off)
				require.LessOrEqual(t, off, committed, "step %d", step)
				require.Equal(t, image(t, rng, log, off, stages, at), rawEntries(t, h.engine(), partition),
					"step %d: after a crash", step)
			}
			if hasOffset && (!ok || off < committed) {
				// The crash lost checkpoints the group committed: catch
				// up from the changelog, as the chain's restore does
				// (from the start after wiping, without a local offset).
				caughtUp++
				if !ok {
					require.NoError(t, ps.Reset())
					off = 0
				}
				require.NoError(t, cs.Restore(log[off:committed], committed))
				require.NoError(t, cs.FinishRestore(lastCps, committed))
				require.Equal(t, image(t, rng, log, committed, stages, lastCps), rawEntries(t, h.engine(), partition),
					"step %d: caught up from the changelog", step)
				for i := range nexts {
					nexts[i] = lastCps[i].Next
				}
				off = committed
			}
			// What the chain's restore does with records appended after
			// the offset by attempts that never committed: cancel them.
			if junk := log[off:]; len(junk) > 0 {
				keys := make([][]byte, len(junk))
				for i, r := range junk {
					keys[i] = r.Key
				}
				recs, err := cs.Compensate(keys)
				require.NoError(t, err)
				log = append(log, recs...)
				got, _, err := cs.Checkpoints()
				require.NoError(t, err)
				require.NoError(t, cs.FinishRestore(got, int64(len(log))))
				lastCps, hasOffset = got, true
				committed = int64(len(log))
				cpsAt[committed] = got
				require.Equal(t, image(t, rng, log, int64(len(log)), stages, got), rawEntries(t, h.engine(), partition),
					"step %d: compensated", step)
			}
		}
	}
	return caughtUp
}

func TestPreparedCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a", "b"}
		ps := h.open(t, 0, st)
		cs := changelogStore(t, ps)
		set(t, ps.Stage(0), 0, "x", "1")
		set(t, ps.Stage(1), 0, "y", "2")
		set(t, ps.Stage(0), 1, "x", "3") // x's last write wins
		set(t, ps.Stage(1), 5, "z", "4") // above b's Next: stays pending
		del(t, ps.Stage(0), 1, "gone")

		pc, err := cs.PrepareCheckpoint(cps(st, 2, 1), time.Time{})
		require.NoError(t, err)
		var got []string
		for _, r := range userRecords(pc.Records()) {
			if r.Value == nil {
				got = append(got, string(r.Key)+"=<tombstone>")
				continue
			}
			v, err := storedValue(r.Value)
			require.NoError(t, err)
			got = append(got, string(r.Key)+"="+string(userValue(v)))
		}
		assert.Equal(t, []string{"y=2", "x=3", "gone=<tombstone>"}, got, "each key's last write, in write order")
		requireGet(t, ps.Stage(0), "x", "3", true) // reads go on meanwhile
		set(t, ps.Stage(0), 2, "w", "5")           // and writes
		pc.Abort()
		pc.Abort() // idempotent
		assert.Empty(t, h.persisted(t, 0), "abort writes nothing")
		_, _, ok, err := cs.ChangelogOffset()
		require.NoError(t, err)
		assert.False(t, ok)

		pc, err = cs.PrepareCheckpoint(cps(st, 3, 1), time.Time{})
		require.NoError(t, err)
		assert.Len(t, userRecords(pc.Records()), 4, "the aborted writes are taken again, with the newer one")
		require.NoError(t, pc.Commit(17))
		require.Error(t, pc.Commit(18), "a prepared checkpoint commits once")
		assert.Equal(t, map[string]string{"x": "3", "y": "2", "w": "5"}, h.persisted(t, 0))
		off, _, ok, err := cs.ChangelogOffset()
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, int64(17), off)
		requireGet(t, ps.Stage(1), "z", "4", true)

		// A checkpoint without the changelog leaves the state no longer its image.
		require.NoError(t, ps.Checkpoint(cps(st, 3, 6), time.Time{}))
		_, _, ok, err = cs.ChangelogOffset()
		require.NoError(t, err)
		assert.False(t, ok, "Checkpoint drops the changelog offset")
	})
}

// A prepared checkpoint's changelog records bring the changelog to the
// batch's state: an evicted persisted entry is a tombstone, and an entry
// written and expired between two checkpoints leaves nothing at all.
func TestPreparedEvictionsAreTombstones(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a"}
		ps := h.open(t, 0, st)
		cs := changelogStore(t, ps)
		t0 := time.Unix(1_800_000_000, 0)
		setExp(t, ps.Stage(0), 0, "old", "1", t0)
		setExp(t, ps.Stage(0), 0, "new", "2", t0.Add(time.Hour))
		require.NoError(t, ps.Checkpoint(cps(st, 1), time.Time{}))
		setExp(t, ps.Stage(0), 1, "fresh", "3", t0) // written and evicted in one batch, never persisted
		setExp(t, ps.Stage(0), 1, "new", "4", t0)   // a persisted key rewritten, expired by this batch
		setExp(t, ps.Stage(0), 1, "kept", "5", t0.Add(time.Hour))

		pc, err := cs.PrepareCheckpoint(cps(st, 2), t0)
		require.NoError(t, err)
		var got []string
		for _, r := range pc.Records() {
			got = append(got, fmt.Sprintf("%s:%v", r.Key, r.Value != nil))
		}
		assert.ElementsMatch(t, []string{"kept:true", "new:false", "old:false"}, got,
			"an entry born and expired between two checkpoints leaves no record; a persisted one is deleted")
		require.NoError(t, pc.Commit(3))
		assert.Equal(t, map[string]string{"kept": "5"}, h.persisted(t, 0))
		for _, k := range []string{"fresh", "new", "old"} {
			_, ok, err := ps.Stage(0).Get([]byte(k))
			require.NoError(t, err)
			assert.False(t, ok, "%s reads as evicted", k)
		}
	})
}

func TestRestoreAndFinish(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a", "b"}
		ps := h.open(t, 0, st)
		cs := changelogStore(t, ps)
		set(t, ps.Stage(0), 0, "stale", "x")
		require.NoError(t, ps.Checkpoint(cps(st, 1, 1), time.Time{}))

		exp := time.Unix(1_800_000_000, 0)
		recs := []chain.ChangelogRecord{
			{Offset: 0, Key: []byte("k1"), Value: changelogValue(appendValue(nil, 0, []byte("v1")))},
			{Offset: 1, Key: []byte("k2"), Value: changelogValue(appendValue(nil, expiryNanos(exp), []byte("v2")))},
			{Offset: 3, Key: []byte("k1"), Value: nil},
			{Offset: 4, Key: []byte("stale"), Value: nil},
		}
		require.NoError(t, cs.Restore(recs[:2], 2))
		_, ok, err := cs.Checkpoints()
		require.NoError(t, err)
		assert.False(t, ok, "mid-restore the state is at no position")
		off, _, ok, err := cs.ChangelogOffset()
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, int64(2), off)

		require.NoError(t, cs.Restore(recs[2:], 5))
		require.NoError(t, cs.FinishRestore(cps(st, 9, 8), 6))
		assert.Equal(t, map[string]string{"k2": "v2"}, h.persisted(t, 0))
		assert.Equal(t, []string{"k2@" + exp.UTC().Format("15:04")}, h.indexEntries(t, 0), "restored entries expire like written ones")
		got, ok, err := cs.Checkpoints()
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, cps(st, 9, 8), got)
		off, _, _, err = cs.ChangelogOffset()
		require.NoError(t, err)
		assert.Equal(t, int64(6), off)

		// A restored entry is evicted like any other.
		require.NoError(t, ps.Checkpoint(cps(st, 9, 8), exp))
		assert.Empty(t, h.persisted(t, 0))

		bad := []chain.ChangelogRecord{{Key: []byte("k"), Value: []byte{9, 1, 2}}}
		require.ErrorIs(t, cs.Restore(bad, 7), ErrCorrupt)
		require.ErrorIs(t, cs.FinishRestore(nil, -1), ErrInvalid)

		require.NoError(t, ps.Reset())
		_, _, ok, err = cs.ChangelogOffset()
		require.NoError(t, err)
		assert.False(t, ok, "Reset drops the changelog offset")
	})
}

func TestCompensateAndSnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a"}
		ps := h.open(t, 0, st)
		cs := changelogStore(t, ps)
		want := map[string]string{}
		for i := range 2*snapshotBatch + 3 {
			k := fmt.Sprintf("key-%05d", i)
			set(t, ps.Stage(0), 0, k, fmt.Sprint(i))
			want[k] = fmt.Sprint(i)
		}
		require.NoError(t, ps.Checkpoint(cps(st, 1), time.Time{}))
		set(t, ps.Stage(0), 1, "pending", "p") // not persisted: not in either

		got := map[string]string{}
		batches := 0
		require.NoError(t, cs.Snapshot(func(recs []chain.ChangelogRecord) error {
			batches++
			for _, r := range recs {
				v, err := storedValue(r.Value)
				require.NoError(t, err)
				got[string(r.Key)] = string(userValue(v))
			}
			return nil
		}))
		assert.Equal(t, want, got)
		assert.Equal(t, 3, batches)

		recs, err := cs.Compensate([][]byte{[]byte("key-00007"), []byte("pending"), []byte("none")})
		require.NoError(t, err)
		require.Len(t, recs, 3)
		v, err := storedValue(recs[0].Value)
		require.NoError(t, err)
		assert.Equal(t, "7", string(userValue(v)))
		assert.Nil(t, recs[1].Value, "pending writes are not the persisted state")
		assert.Nil(t, recs[2].Value)
		assert.Equal(t, "none", string(recs[2].Key))
	})
}

// A crash in the middle of a restore (unsynced batches) leaves a prefix of
// it: the recorded offset still says which prefix the entries are.
func TestRestoreCrashLeavesAPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a"}
		rng := rand.New(rand.NewPCG(3, 3))
		var log []chain.ChangelogRecord
		for i := range 200 {
			k := fmt.Sprint("k", rng.IntN(30))
			var v []byte
			if rng.IntN(5) != 0 {
				v = changelogValue(appendValue(nil, 0, []byte(fmt.Sprint(i))))
			}
			log = append(log, chain.ChangelogRecord{Offset: int64(i), Key: []byte(k), Value: v})
		}
		cs := changelogStore(t, h.open(t, 0, st))
		for i := 0; i < 150; i += 10 {
			require.NoError(t, cs.Restore(log[i:i+10], int64(i+10)))
		}
		h.crash(t)
		cs = changelogStore(t, h.open(t, 0, st))
		off, _, ok, err := cs.ChangelogOffset()
		require.NoError(t, err)
		if !ok {
			off = 0
		}
		require.LessOrEqual(t, off, int64(150))
		assert.Equal(t, image(t, rng, log, off, st, nil), rawEntries(t, h.engine(), 0))
	})
}

// TestRestoredKeysAreVisible: Get and Scan see what Restore wrote, also
// when the partition read (and cached a scan iterator) before the restore:
// a restore must add its keys to the filter of persisted keys (or a Get of
// them answers "never written") and drop the cached iterators.
func TestRestoredKeysAreVisible(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a"}
		ps := h.open(t, 0, st)
		cs := changelogStore(t, ps)
		ss := ps.Stage(0)
		_, ok, err := ss.Get([]byte("k1"))
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, ss.Scan([]byte("k"), []byte("l"), func(k, v []byte) bool { return true }))

		recs := []chain.ChangelogRecord{
			{Offset: 0, Key: []byte("k1"), Value: changelogValue(appendValue(nil, 0, []byte("v1")))},
			{Offset: 1, Key: []byte("k2"), Value: changelogValue(appendValue(nil, 0, []byte("v2")))},
		}
		require.NoError(t, cs.Restore(recs, 2))
		require.NoError(t, cs.FinishRestore(cps(st, 2, 2), 2))

		for _, k := range []string{"k1", "k2"} {
			v, ok, err := ss.Get([]byte(k))
			require.NoError(t, err)
			require.True(t, ok, "Get(%s) after the restore", k)
			assert.Equal(t, "v"+k[1:], string(v))
		}
		var got []string
		require.NoError(t, ss.Scan([]byte("k"), []byte("l"), func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return true
		}))
		assert.Equal(t, []string{"k1=v1", "k2=v2"}, got)
	})
}
