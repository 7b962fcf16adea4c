package store

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// TestExpiryIndexIsRebuiltOnOpen: the index lives in memory only, so a
// partition opened again — a new handle, a restarted process — must find
// its expiring entries from the entries themselves and evict them on time.
func TestExpiryIndexIsRebuiltOnOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"s"}
		ps := h.open(t, 0, st)
		for i := range 4 {
			setExp(t, ps.Stage(0), int64(i), fmt.Sprint("k", i), "v", time.Unix(int64(100*(i+1)), 0))
		}
		set(t, ps.Stage(0), 4, "forever", "v")
		require.NoError(t, ps.Checkpoint(cps(st, 5), time.Time{}))
		require.NoError(t, ps.Close())

		ps = h.open(t, 0, st)
		require.Equal(t, []string{"k0@00:01", "k1@00:03", "k2@00:05", "k3@00:06"}, h.indexEntries(t, 0))
		require.NoError(t, ps.Checkpoint(cps(st, 5), time.Unix(250, 0)))
		require.Equal(t, map[string]string{"k2": "v", "k3": "v", "forever": "v"}, h.persisted(t, 0))
		require.Equal(t, []string{"k2@00:05", "k3@00:06"}, h.indexEntries(t, 0))
	})
}

// TestFailedCheckpointKeepsTheExpiryIndex: a checkpoint whose batch fails
// takes nothing out of the index and adds nothing to it, so the retry
// evicts what the failed one would have.
func TestFailedCheckpointKeepsTheExpiryIndex(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		fb := &failingBackend{backend: h.engine().be}
		h.engine().be = fb
		st := []string{"s"}
		ps := h.open(t, 0, st)
		setExp(t, ps.Stage(0), 0, "old", "v", time.Unix(100, 0))
		require.NoError(t, ps.Checkpoint(cps(st, 1), time.Time{}))
		setExp(t, ps.Stage(0), 1, "new", "v", time.Unix(1000, 0))

		fb.fail = true
		require.ErrorIs(t, ps.Checkpoint(cps(st, 2), time.Unix(200, 0)), errInjected)
		require.Equal(t, []string{"old@00:01"}, h.indexEntries(t, 0))

		fb.fail = false
		require.NoError(t, ps.Checkpoint(cps(st, 2), time.Unix(200, 0)))
		require.Equal(t, map[string]string{"new": "v"}, h.persisted(t, 0))
		require.Equal(t, []string{"new@00:16"}, h.indexEntries(t, 0))
	})
}

// TestFormat2IsConverted: a database of format 2 (the expiry index
// persisted under x/) opens as format 3: its index keys are gone, its
// entries and checkpoints stay, and its expiring entries are evicted from
// the index built in memory.
func TestFormat2IsConverted(t *testing.T) {
	fs := vfs.NewMem()
	pdb, err := pebble.Open("db", &pebble.Options{FS: fs})
	require.NoError(t, err)
	b := pdb.NewBatch()
	require.NoError(t, b.Set(metaVersionKey, binary.BigEndian.AppendUint32(nil, 2), nil))
	for p := range int32(2) {
		ks := newKeyspace(topic, p)
		for i, exp := range []int64{100, 300} {
			key := fmt.Sprint("k", i)
			val := binary.BigEndian.AppendUint64(nil, uint64(time.Unix(exp, 0).UnixNano()))
			require.NoError(t, b.Set(entry(nil, ks, key), append(val, 'v'), nil))
			require.NoError(t, b.Set(index(nil, ks, time.Unix(exp, 0).UnixNano(), key), nil, nil))
		}
		require.NoError(t, b.Set(checkpointKey(nil, ks, "s"), encodeCheckpoint(cps([]string{"s"}, 2)[0]), nil))
	}
	require.NoError(t, b.Commit(pebble.Sync))
	require.NoError(t, pdb.Close())

	db, err := OpenPebble("db", WithFS(fs))
	require.NoError(t, err)
	h := &harness{store: db}
	for p := range int32(2) {
		ps := h.open(t, p, []string{"s"})
		got, ok, err := ps.Checkpoints()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(2), got[0].Next)
		require.Equal(t, []string{"k0@00:01", "k1@00:05"}, h.indexEntries(t, p)) // also: no x/ key left
		require.NoError(t, ps.Checkpoint(cps([]string{"s"}, 2), time.Unix(200, 0)))
		require.Equal(t, map[string]string{"k1": "v"}, h.persisted(t, p))
	}
	require.NoError(t, db.Close())

	pdb, err = pebble.Open("db", &pebble.Options{FS: fs})
	require.NoError(t, err)
	defer pdb.Close()
	v, closer, err := pdb.Get(metaVersionKey)
	require.NoError(t, err)
	require.Equal(t, binary.BigEndian.AppendUint32(nil, formatVersion), v)
	require.NoError(t, closer.Close())
}

// index is format 2's key of the expiry index item of key at exp.
func index[K string | []byte](dst []byte, ks keyspace, exp int64, key K) []byte {
	dst = append(dst, ks.prefix...)
	dst = append(dst, indexTag, '/')
	dst = binary.BigEndian.AppendUint64(dst, uint64(exp))
	return append(dst, key...)
}

// TestExpiryHeapPopsInOrder: whatever the order items are pushed in, or
// bulk-loaded in, popThrough returns them by (expiry, key) and stops at its
// bound and its limit.
func TestExpiryHeapPopsInOrder(t *testing.T) {
	var items []expiryItem
	for i := range 200 {
		// A fixed permutation with repeated expiries (ties broken by key).
		items = append(items, expiryItem{exp: int64(1 + (i*37)%50), key: fmt.Sprintf("k%03d", (i*91)%200)})
	}
	want := append([]expiryItem(nil), items...)
	slices.SortFunc(want, func(a, b expiryItem) int {
		if c := cmp.Compare(a.exp, b.exp); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})

	var pushed, loaded expiryIndex
	for _, it := range items {
		pushed.add(it.exp, it.key)
	}
	loaded.addAll(items)
	for _, x := range []*expiryIndex{&pushed, &loaded} {
		got, complete := x.popThrough(nil, 25, 10)
		require.False(t, complete)
		require.Equal(t, want[:10], got)
		got, complete = x.popThrough(got, 25, len(items))
		require.True(t, complete)
		n := 0
		for n < len(want) && want[n].exp <= 25 {
			n++
		}
		require.Equal(t, want[:n], got)
		got, complete = x.popThrough(nil, 1<<62, len(items))
		require.True(t, complete)
		require.Equal(t, want[n:], got)
		require.Zero(t, x.len())
	}
}
