package store

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// harness is one store under test, with ways to restart it.
type harness struct {
	store chain.Store
	// seeds is how many random histories property tests run: restarts cost
	// from nothing (memory) to a real fsync'd open (pebble-disk).
	seeds int
	// crash simulates a process crash: everything not synced to the
	// persisted layer is lost, and h.store is a fresh store over what is.
	crash func(t *testing.T)
	// restart closes the store cleanly and opens it again.
	restart func(t *testing.T)
	// lossy: crash loses what was written without a sync.
	lossy bool
}

func (h *harness) engine() *engine {
	switch s := h.store.(type) {
	case *DB:
		return &s.engine
	case *Memory:
		return &s.engine
	}
	panic("unknown store")
}

type backendCase struct {
	name string
	new  func(t *testing.T) *harness
}

// backends lists every implementation; every test runs against each.
var backends = []backendCase{
	{"memory", newMemoryHarness},
	{"pebble-memfs", newPebbleMemHarness},
	{"pebble-disk", newPebbleDiskHarness},
	// A state cache too small for any partition's history: partitions
	// start mirrored and drop their mirror as they grow, mid-scan and
	// mid-checkpoint; every result must be the same.
	{"pebble-memfs-tinycache", func(t *testing.T) *harness { return newPebbleMemHarnessWith(t, WithStateCacheBytes(tinyCache)) }},
}

// tinyCache is a state cache budget of a few entries.
const tinyCache = 6 * (entryOverhead + 40)

func newMemoryHarness(t *testing.T) *harness {
	be := newMemBackend()
	h := &harness{store: newMemoryOn(be), seeds: 300}
	// The map is the persisted layer: a crash keeps it and loses every
	// partition's overlay and pending writes (the old Memory is abandoned).
	h.crash = func(t *testing.T) { h.store = newMemoryOn(be) }
	h.restart = func(t *testing.T) {
		require.NoError(t, h.store.(*Memory).Close())
		h.store = newMemoryOn(be)
	}
	return h
}

// newPebbleMemHarness mirrors every partition (pebble-disk runs with the
// default, no mirror; pebble-memfs-tinycache drops its mirrors).
func newPebbleMemHarness(t *testing.T) *harness {
	return newPebbleMemHarnessWith(t, WithStateCacheBytes(1<<30))
}

func newPebbleMemHarnessWith(t *testing.T, opts ...Option) *harness {
	fs := vfs.NewCrashableMem()
	open := func(t *testing.T) *DB {
		db, err := OpenPebble("db", append([]Option{WithFS(fs)}, opts...)...)
		require.NoError(t, err)
		return db
	}
	h := &harness{store: open(t), seeds: 40, lossy: true}
	if len(opts) > 1 || len(opts) == 1 && !isFullCache(opts[0]) {
		h.seeds = 8 // the same store code on another read path: fewer histories
	}
	// A crash keeps exactly what Pebble synced.
	h.crash = func(t *testing.T) {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{})
		require.NoError(t, h.store.(*DB).Close())
		fs = crashed
		h.store = open(t)
	}
	h.restart = func(t *testing.T) {
		require.NoError(t, h.store.(*DB).Close())
		h.store = open(t)
	}
	t.Cleanup(func() { _ = h.store.(*DB).Close() })
	return h
}

func newPebbleDiskHarness(t *testing.T) *harness {
	dir := t.TempDir()
	open := func(t *testing.T) *DB {
		db, err := OpenPebble(dir)
		require.NoError(t, err)
		return db
	}
	h := &harness{store: open(t), seeds: 4}
	// On a real disk the closest to a crash is a close that persists
	// nothing beyond what was already committed (no final checkpoint).
	h.restart = func(t *testing.T) {
		require.NoError(t, h.store.(*DB).Close())
		h.store = open(t)
	}
	h.crash = h.restart
	t.Cleanup(func() { _ = h.store.(*DB).Close() })
	return h
}

func forEachBackend(t *testing.T, fn func(t *testing.T, h *harness)) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) { fn(t, bc.new(t)) })
	}
}

const topic = "events"

var stages3 = []string{"click", "install", "purchase"}

func (h *harness) open(t *testing.T, partition int32, stages []string) chain.PartitionStore {
	t.Helper()
	ps, err := h.store.OpenPartition(topic, partition, stages)
	require.NoError(t, err)
	return ps
}

// cps builds checkpoints for stages with the given Nexts.
func cps(stages []string, nexts ...int64) []commit.Checkpoint {
	out := make([]commit.Checkpoint, len(stages))
	for i, s := range stages {
		out[i] = commit.Checkpoint{Stage: s, Next: nexts[i], Watermark: 1000 + nexts[i]}
	}
	return out
}

func set(t *testing.T, ss chain.StageState, off int64, key, value string) {
	t.Helper()
	require.NoError(t, ss.Set(off, []byte(key), []byte(value), time.Time{}))
}

func setExp(t *testing.T, ss chain.StageState, off int64, key, value string, exp time.Time) {
	t.Helper()
	require.NoError(t, ss.Set(off, []byte(key), []byte(value), exp))
}

func del(t *testing.T, ss chain.StageState, off int64, key string) {
	t.Helper()
	require.NoError(t, ss.Delete(off, []byte(key)))
}

// requireGet asserts that key reads as want ("" with present=false for
// absent).
func requireGet(t *testing.T, ss chain.StageState, key, want string, present bool) {
	t.Helper()
	v, ok, err := ss.Get([]byte(key))
	require.NoError(t, err)
	require.Equal(t, present, ok, "key %q present", key)
	if present {
		require.Equal(t, want, string(v), "key %q", key)
	}
}

// persisted returns the user entries persisted for partition, read from
// the backend directly (bypassing any overlay); the histories' entries
// (asof.go) are not user entries: persistedHists has them.
func (h *harness) persisted(t *testing.T, partition int32) map[string]string {
	t.Helper()
	out := h.persistedAll(t, partition)
	for k := range out {
		if isHistKey(k) {
			delete(out, k)
		}
	}
	return out
}

// persistedHists returns the persisted histories' entries of partition,
// by user key.
func (h *harness) persistedHists(t *testing.T, partition int32) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range h.persistedAll(t, partition) {
		if isHistKey(k) {
			out[k[len(histPrefix):]] = v
		}
	}
	return out
}

func (h *harness) persistedAll(t *testing.T, partition int32) map[string]string {
	t.Helper()
	e := h.engine()
	ks := newKeyspace(topic, partition)
	lo := appendTagged(nil, ks, entryTag, "")
	hi := appendTagged(nil, ks, entryTag+1, "")
	out := map[string]string{}
	var keys [][]byte
	require.NoError(t, e.be.scan(lo, hi[:len(hi)-1], func(k []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}))
	for _, k := range keys {
		v, ok, err := e.be.get(k)
		require.NoError(t, err)
		require.True(t, ok)
		out[string(k[len(lo):])] = string(v[expiryLen:])
	}
	return out
}

// indexEntries returns the expiry index items of the open partition as
// "<user key>@<expiry hh:mm>", earliest first, and checks that the
// backend holds no index key (format 3 keeps the index in memory only).
func (h *harness) indexEntries(t *testing.T, partition int32) []string {
	t.Helper()
	ks := newKeyspace(topic, partition)
	lo := appendTagged(nil, ks, indexTag, "")
	n := 0
	require.NoError(t, h.engine().be.scan(lo, appendTagged(nil, ks, indexTag+1, "")[:len(lo)-1], func([]byte) bool { n++; return true }))
	require.Zero(t, n, "index keys in the backend")
	e := h.engine()
	e.mu.Lock()
	p := e.mu.open[string(ks.prefix)]
	e.mu.Unlock()
	require.NotNil(t, p, "partition %d is not open", partition)
	p.ckpt.Lock()
	items := slices.Clone(p.ckpt.exp.h)
	p.ckpt.Unlock()
	slices.SortFunc(items, func(a, b expiryItem) int { return cmp.Or(cmp.Compare(a.exp, b.exp), strings.Compare(a.key, b.key)) })
	var out []string
	for _, it := range items {
		out = append(out, it.key+"@"+time.Unix(0, it.exp).UTC().Format("15:04"))
	}
	return out
}

// allKeys counts every persisted key of partition (entries, index,
// checkpoints).
func (h *harness) allKeys(t *testing.T, partition int32) int {
	t.Helper()
	ks := newKeyspace(topic, partition)
	n := 0
	require.NoError(t, h.engine().be.scan(ks.prefix, ks.end(), func([]byte) bool { n++; return true }))
	return n
}

func isFullCache(o Option) bool {
	var c config
	o.apply(&c)
	return c.cacheBytes >= 1<<30
}
