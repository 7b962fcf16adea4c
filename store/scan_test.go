package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// scanAll returns "key=value" of every entry Scan (or ScanReverse) passes in
// [lo, hi); hi "" means no upper bound.
func scanAll(t *testing.T, ss chain.StageState, lo, hi string, reverse bool) []string {
	t.Helper()
	var out []string
	fn := func(k, v []byte) bool { out = append(out, string(k)+"="+string(v)); return true }
	var hb []byte
	if hi != "" {
		hb = []byte(hi)
	}
	var err error
	if reverse {
		err = ss.ScanReverse([]byte(lo), hb, fn)
	} else {
		err = ss.Scan([]byte(lo), hb, fn)
	}
	require.NoError(t, err)
	return out
}

func reversed(s []string) []string {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func TestScanMergesPendingAndPersisted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		s0, s1, s2 := ps.Stage(0), ps.Stage(1), ps.Stage(2)
		// Persisted: a, b, c, d, e.
		for i, k := range []string{"a", "b", "c", "d", "e"} {
			set(t, s0, int64(i), k, "old-"+k)
		}
		require.NoError(t, ps.Checkpoint(cps(stages3, 10, 10, 10), time.Time{}))
		// Pending, from every stage: b rewritten, c deleted, bb and f new,
		// e deleted and written again.
		set(t, s1, 10, "b", "new-b")
		del(t, s2, 10, "c")
		set(t, s0, 11, "bb", "new-bb")
		set(t, s2, 11, "f", "new-f")
		del(t, s1, 12, "e")
		set(t, s0, 13, "e", "new-e")

		want := []string{"a=old-a", "b=new-b", "bb=new-bb", "d=old-d", "e=new-e", "f=new-f"}
		check := func(ss chain.StageState) {
			t.Helper()
			require.Equal(t, want, scanAll(t, ss, "", "", false))
			require.Equal(t, reversed(want), scanAll(t, ss, "", "", true))
			// Bounds: lo inclusive, hi exclusive, in both directions.
			require.Equal(t, want[1:4], scanAll(t, ss, "b", "e", false))
			require.Equal(t, reversed(want[1:4]), scanAll(t, ss, "b", "e", true))
			require.Equal(t, want[2:4], scanAll(t, ss, "ba", "dz", false))
			require.Equal(t, reversed(want[2:4]), scanAll(t, ss, "ba", "dz", true))
			require.Empty(t, scanAll(t, ss, "c", "cz", false))
			require.Empty(t, scanAll(t, ss, "e", "e", true))
			require.Empty(t, scanAll(t, ss, "z", "a", true))
		}
		check(s0)
		check(s2)
		// The same after the pending writes are persisted, and after a
		// restart.
		require.NoError(t, ps.Checkpoint(cps(stages3, 20, 20, 20), time.Time{}))
		check(s1)
		h.restart(t)
		check(h.open(t, 0, stages3).Stage(0))
	})
}

func TestScanStopsWhenFnReturnsFalse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		for i := range 10 {
			set(t, ss, int64(i), fmt.Sprint("k", i), "v")
		}
		require.NoError(t, ps.Checkpoint(cps(stages3, 5, 5, 5), time.Time{}))
		for _, reverse := range []bool{false, true} {
			var got []string
			fn := func(k, _ []byte) bool { got = append(got, string(k)); return len(got) < 3 }
			var err error
			if reverse {
				err = ss.ScanReverse([]byte("k"), []byte("l"), fn)
			} else {
				err = ss.Scan([]byte("k"), []byte("l"), fn)
			}
			require.NoError(t, err)
			if reverse {
				require.Equal(t, []string{"k9", "k8", "k7"}, got)
			} else {
				require.Equal(t, []string{"k0", "k1", "k2"}, got)
			}
		}
	})
}

// TestScanSeesEvictionLikeGet: an evicted entry is gone from scans as from
// Get, and a pending write over an evicted key still reads.
func TestScanSeesEvictionLikeGet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		exp := time.Unix(100, 0)
		setExp(t, ss, 0, "a", "1", exp)
		setExp(t, ss, 1, "b", "2", exp)
		setExp(t, ss, 2, "c", "3", time.Unix(200, 0))
		require.NoError(t, ps.Checkpoint(cps(stages3, 3, 3, 3), time.Time{}))
		set(t, ss, 3, "b", "pending") // not covered by the next checkpoint
		require.NoError(t, ps.Checkpoint(cps(stages3, 3, 3, 3), time.Unix(150, 0)))
		require.Equal(t, []string{"b=pending", "c=3"}, scanAll(t, ss, "", "", false))
		requireGet(t, ss, "a", "", false)
	})
}

// TestScanSeesWritesPersistedDuringTheScan is the race the scanner's
// generation check exists for: the scan opens its backend iterator (on
// Pebble, a snapshot) while b and a are pending; during the scan a
// checkpoint persists them and drops them from the overlay. The scan must
// still pass them. Without the refresh it would find them in neither.
func TestScanSeesWritesPersistedDuringTheScan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		for i, k := range []string{"a", "b", "c"} {
			set(t, ss, int64(i), k, "v"+k)
		}
		for _, reverse := range []bool{false, true} {
			var got []string
			first := true
			fn := func(k, v []byte) bool {
				got = append(got, string(k)+"="+string(v))
				if first {
					first = false
					require.NoError(t, ps.Checkpoint(cps(stages3, 100, 100, 100), time.Time{}))
				}
				return true
			}
			var err error
			if reverse {
				err = ss.ScanReverse(nil, nil, fn)
			} else {
				err = ss.Scan(nil, nil, fn)
			}
			require.NoError(t, err)
			want := []string{"a=va", "b=vb", "c=vc"}
			if reverse {
				want = reversed(want)
			}
			require.Equal(t, want, got)
			// Pending again for the other direction.
			for i, k := range []string{"a", "b", "c"} {
				set(t, ss, int64(100+i), k, "v"+k)
			}
			require.NoError(t, ps.Reset())
			for i, k := range []string{"a", "b", "c"} {
				set(t, ss, int64(i), k, "v"+k)
			}
		}
	})
}

// TestScanFnMayWrite: fn runs without the partition's lock, so it may call
// the state, including writes into the scanned range.
func TestScanFnMayWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		set(t, ss, 0, "a", "1")
		set(t, ss, 1, "c", "3")
		require.NoError(t, ps.Checkpoint(cps(stages3, 1, 1, 1), time.Time{}))
		var got []string
		require.NoError(t, ss.Scan(nil, nil, func(k, v []byte) bool {
			got = append(got, string(k))
			if string(k) == "a" {
				set(t, ss, 2, "z", "26")
				requireGet(t, ss, "c", "3", true)
			}
			return true
		}))
		require.Equal(t, "a", got[0])
		require.Contains(t, got, "c")
		requireGet(t, ss, "z", "26", true)
	})
}

func TestScanAfterClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, stages3)
		ss := ps.Stage(0)
		require.NoError(t, ps.Close())
		err := ss.Scan(nil, nil, func(_, _ []byte) bool { return true })
		require.True(t, errors.Is(err, ErrClosed), "%v", err)
		err = ss.ScanReverse([]byte("a"), []byte("b"), func(_, _ []byte) bool { return true })
		require.True(t, errors.Is(err, ErrClosed), "%v", err)
	})
}

// TestScanDuringConcurrentCheckpoints runs scans while other goroutines
// write and checkpoint (run it with -race): keys written once before the
// scans begin must always be seen, with their value, whatever the
// checkpoints do meanwhile; keys being rewritten may show any of their
// values.
func TestScanDuringConcurrentCheckpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, []string{"s"})
		ss := ps.Stage(0)
		const stable = 200
		for i := range stable {
			set(t, ss, int64(i), fmt.Sprintf("s%03d", i), fmt.Sprint(i))
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var next int64 = stable
		wg.Add(1)
		go func() { // writer and checkpointer: persists the stable keys a few at a time
			defer wg.Done()
			for n := int64(0); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = ss.Set(next, []byte(fmt.Sprintf("w%02d", n%50)), []byte("x"), time.Time{})
				next++
				cp := []string{"s"}
				_ = ps.Checkpoint(cps(cp, min(n*3, next)), time.Time{})
			}
		}()
		for round := range 200 {
			reverse := round%2 == 1
			var got []string
			fn := func(k, v []byte) bool {
				if strings.HasPrefix(string(k), "s") {
					got = append(got, string(k)+"="+string(v))
				}
				return true
			}
			var err error
			if reverse {
				err = ss.ScanReverse(nil, nil, fn)
			} else {
				err = ss.Scan(nil, nil, fn)
			}
			require.NoError(t, err)
			require.Len(t, got, stable, "round %d", round)
			for j, kv := range got {
				i := j
				if reverse {
					i = stable - 1 - j
				}
				require.Equal(t, fmt.Sprintf("s%03d=%d", i, i), kv)
			}
		}
		close(stop)
		wg.Wait()
	})
}

// TestScanOrdersKeysWhenARangeFirstCoversThem: the overlay keeps in key
// order only the keys whose first byte a range read has covered (and the
// empty key), and a range read sees exactly what Get sees whichever bytes
// were covered before it. Random writes, deletes, checkpoints and scans
// over keys of six first bytes (one of them never scanned, as the
// attribution processors' deduplication keys are) are checked against a
// model of the latest values.
func TestScanOrdersKeysWhenARangeFirstCoversThem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"a"}
		ps := h.open(t, 0, st).(*partitionStore)
		ss := ps.Stage(0)
		rng := rand.New(rand.NewPCG(7, 11))
		firsts := []string{"c/", "i/", "v/", "w", "x/"}
		model := map[string]string{}
		covered := map[byte]bool{}
		var off int64
		key := func() string {
			if rng.IntN(40) == 0 {
				return ""
			}
			if rng.IntN(3) == 0 {
				return fmt.Sprintf("d/%d", rng.IntN(200)) // never scanned
			}
			return fmt.Sprintf("%s%d", firsts[rng.IntN(len(firsts))], rng.IntN(50))
		}
		for range 3000 {
			switch n := rng.IntN(20); {
			case n < 10:
				k, v := key(), fmt.Sprint("v", off)
				set(t, ss, off, k, v)
				model[k] = v
				off++
			case n < 13:
				k := key()
				del(t, ss, off, k)
				delete(model, k)
				off++
			case n < 14:
				require.NoError(t, ps.Checkpoint(cps(st, off-int64(rng.IntN(5))), time.Time{}))
			default:
				f := firsts[rng.IntN(len(firsts))]
				lo, hi := f, f+"\xff"
				if rng.IntN(4) == 0 {
					lo, hi = "", "c/\xff" // from the empty key, bytes below 'd
				}
				var keys, want []string
				for k := range model {
					if k >= lo && k < hi {
						keys = append(keys, k)
					}
				}
				slices.Sort(keys)
				for _, k := range keys {
					want = append(want, k+"="+model[k])
				}
				reverse := rng.IntN(2) == 0
				got := scanAll(t, ss, lo, hi, reverse)
				if reverse {
					got = reversed(got)
				}
				require.Equal(t, want, got, "scan [%q, %q)", lo, hi)
				for b := int(lo0(lo)); b <= int(hi[0]); b++ {
					covered[byte(b)] = true
				}
			}
			// The ordered keys are the overlay's keys of covered bytes.
			ps.mu.Lock()
			want := 0
			for k := range ps.mu.overlay {
				if k == "" || covered[k[0]] {
					want++
				}
			}
			got := ps.mu.keys.Len()
			ps.mu.Unlock()
			require.Equal(t, want, got, "ordered overlay keys")
		}
		require.False(t, covered['d'], "the deduplication-like keys' byte was never scanned")
	})
}

func lo0(lo string) byte {
	if lo == "" {
		return 0
	}
	return lo[0]
}

// TestByteRange: byteRange(f, l) holds exactly the bytes from f to l, for
// every pair.
func TestByteRange(t *testing.T) {
	for f := range 256 {
		for l := f; l < 256; l++ {
			r := byteRange(byte(f), byte(l))
			for b := range 256 {
				if r.has(byte(b)) != (b >= f && b <= l) {
					t.Fatalf("byteRange(%d, %d) has(%d) = %v", f, l, b, r.has(byte(b)))
				}
			}
		}
	}
}
