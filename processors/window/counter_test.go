package window

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// memState is a map-based chain.StageState with the store's eviction rule.
type memState struct {
	m map[string]memEntry
}

type memEntry struct {
	v   []byte
	exp time.Time
}

func newMemState() *memState { return &memState{m: map[string]memEntry{}} }

func (s *memState) Get(key []byte) ([]byte, bool, error) {
	e, ok := s.m[string(key)]
	return e.v, ok, nil
}

func (s *memState) Set(_ int64, key, value []byte, expires time.Time) error {
	s.m[string(key)] = memEntry{v: value, exp: expires}
	return nil
}

func (s *memState) Delete(_ int64, key []byte) error {
	delete(s.m, string(key))
	return nil
}

// Scan and ScanReverse: the counter does no range reads; these sort the
// keys so the type is a complete chain.StageState.
func (s *memState) Scan(lo, hi []byte, fn func(key, value []byte) bool) error {
	for _, k := range s.inRange(lo, hi) {
		if !fn([]byte(k), s.m[k].v) {
			break
		}
	}
	return nil
}

func (s *memState) ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error {
	ks := s.inRange(lo, hi)
	for i := len(ks) - 1; i >= 0; i-- {
		if !fn([]byte(ks[i]), s.m[ks[i]].v) {
			break
		}
	}
	return nil
}

func (s *memState) inRange(lo, hi []byte) []string {
	var ks []string
	for k := range s.m {
		if k >= string(lo) && (hi == nil || k < string(hi)) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// evict deletes what the engine deletes at a checkpoint whose slowest
// watermark is wm: entries with a non-zero expiry <= wm − 1ns.
func (s *memState) evict(wm time.Time) {
	if wm.IsZero() {
		return
	}
	before := wm.Add(-1)
	for k, e := range s.m {
		if !e.exp.IsZero() && !e.exp.After(before) {
			delete(s.m, k)
		}
	}
}

// decodeAll decodes every counter entry (user key → value).
func decodeAll(t *testing.T, c *Counter, s *memState) map[string]value {
	out := map[string]value{}
	for k, e := range s.m {
		user, ok := strings.CutPrefix(k, c.prefix)
		require.True(t, ok, "key %q outside the counter's prefix", k)
		var v value
		require.NoError(t, v.decode(e.v), "key %q", k)
		require.Equal(t, time.Unix(0, c.expiry(v.bs[len(v.bs)-1].idx)), e.exp, "key %q: expiry is the newest bucket's", k)
		out[user] = v
	}
	return out
}

// TestAddMatchesModel is the property test: random configurations and logs
// (keys skewed, times out of order, late records, bucket edges, invalid
// records), each record counted through Add with the engine's stream time,
// random retries of the same record, and random eviction at a watermark
// that trails the stream time as the engine's does. Every count equals the
// brute-force model's; one key never holds more than ⌊(W+L)/B⌋+1 buckets;
// the state still countable at the end equals the model's buckets; and the
// metrics equal the live entries.
func TestAddMatchesModel(t *testing.T) {
	iters := 300
	if testing.Short() {
		iters = 60
	}
	var late, lateCalls, counted, evicted, retried int
	for it := range iters {
		rng := rand.New(rand.NewPCG(uint64(it), 7))
		cfg := genConfig(rng)
		log := genLog(rng, cfg, 50+rng.IntN(400), 1+rng.IntN(12))
		want := modelCounts(log, cfg)
		c, err := New(cfg)
		require.NoError(t, err)
		st := newMemState()
		maxBuckets := int(int64(cfg.Window+cfg.Lateness)/int64(cfg.Bucket)) + 1
		var ewm time.Time // eviction watermark: S at a position the "last stage" reached
		for i, r := range log {
			// The last stage's position moves forward by a random amount,
			// never past the record being processed.
			if j := i - rng.IntN(20); j >= 0 && want[j].s.After(ewm) {
				ewm = want[j].s
			}
			if rng.IntN(3) == 0 {
				before := len(st.m)
				st.evict(ewm)
				evicted += before - len(st.m)
			}
			if !r.valid {
				continue // the engine never hands an invalid record to Process
			}
			pc := chain.NewContext(chain.ContextOptions{Topic: "t", Partition: 0, Offset: int64(i),
				StreamTime: want[i].s, EvictionWatermark: ewm, State: st})
			n, err := c.Add(context.Background(), pc, r.key, r.t)
			require.NoError(t, err)
			if n != want[i].count {
				t.Fatalf("iter %d (%+v) record %d %+v: count %d, model %d", it, cfg, i, r, n, want[i].count)
			}
			if want[i].late {
				late++
				lateCalls++
			} else {
				counted++
			}
			if rng.IntN(8) == 0 { // a retried Process
				again, err := c.Add(context.Background(), pc, r.key, r.t)
				require.NoError(t, err)
				require.Equal(t, n, again, "a repeated Add returns the same count")
				retried++
				if want[i].late {
					lateCalls++
				}
			}
			if e, ok := st.m[string(c.StateKey(r.key))]; ok {
				var v value
				require.NoError(t, v.decode(e.v))
				if len(v.bs) > maxBuckets {
					t.Fatalf("iter %d record %d: %d buckets of %q, more than %d", it, i, len(v.bs), r.key, maxBuckets)
				}
			}
			// The metrics count the entries live at ewm (those the next
			// checkpoint does not evict).
			s := c.Stats()
			keys, bytes := 0, 0
			for k, e := range st.m {
				if !e.exp.Before(ewm) {
					keys++
					bytes += len(k) + len(e.v)
				}
			}
			if s.Keys != int64(keys) || s.StateBytes != int64(bytes) {
				t.Fatalf("iter %d record %d: metrics report %d keys, %d bytes; the live entries are %d, %d bytes",
					it, i, s.Keys, s.StateBytes, keys, bytes)
			}
		}
		// The state still countable at the final stream time is the model's.
		end := want[len(want)-1].s
		if last := log[len(log)-1]; last.valid && last.t.After(end) {
			end = last.t
		}
		got := map[string]map[int64]int64{}
		for k, v := range decodeAll(t, c, st) {
			for _, b := range v.bs {
				if b.idx*c.b+c.span > end.UnixNano() {
					if got[k] == nil {
						got[k] = map[int64]int64{}
					}
					got[k][b.idx*c.b] = b.n
				}
			}
		}
		require.Equal(t, modelBuckets(log, want, cfg, end), got, "iter %d: final countable state", it)
		s := c.Stats()
		require.Equal(t, int64(counted), s.Counted, "iter %d: records counted once each", it)
		require.Equal(t, int64(lateCalls), s.Late, "iter %d: late calls", it)
		counted, lateCalls = 0, 0
	}
	t.Logf("late %d, evicted entries %d, retried %d", late, evicted, retried)
	require.Positive(t, late)
	require.Positive(t, evicted)
	require.Positive(t, retried)
}

// TestCoverage checks that the generated logs exercise what the property
// test is about: late records, out-of-order records that still count,
// records at a larger offset but earlier time than one they are counted
// with, and counts > 1.
func TestCoverage(t *testing.T) {
	var late, outOfOrder, multi int
	for it := range 100 {
		rng := rand.New(rand.NewPCG(uint64(it), 7))
		cfg := genConfig(rng)
		log := genLog(rng, cfg, 300, 4)
		res := modelCounts(log, cfg)
		for i, r := range res {
			switch {
			case r.late:
				late++
			case log[i].valid && r.count > 1:
				multi++
				if log[i].t.Before(r.s) {
					outOfOrder++
				}
			}
		}
	}
	require.Positive(t, late)
	require.Positive(t, outOfOrder)
	require.Positive(t, multi)
	t.Logf("late %d, counted out of order %d, counts > 1: %d", late, outOfOrder, multi)
}

// TestBucketBoundaries pins the rule at bucket granularity on hand-picked
// times (W = 3 buckets of 1 minute, L = 1 minute).
func TestBucketBoundaries(t *testing.T) {
	cfg := Config{Name: "v", Window: 3 * time.Minute, Bucket: time.Minute, Lateness: time.Minute}
	m := func(d time.Duration) time.Time { return base.Add(d) }
	cases := []struct {
		t    time.Time
		want int64
	}{
		{m(0), 1},                              // bucket 0
		{m(59 * time.Second), 2},               // bucket 0
		{m(30 * time.Second), 3},               // earlier, same bucket: the later records count too
		{m(3 * time.Minute), 1},                // bucket 3: window buckets 1..3
		{m(2*time.Minute + 59*time.Second), 4}, // buckets 0..2; the record at bucket 3 (smaller offset) does not count
		{m(2*time.Minute - 1), 0},              // S − t = 1m + 1ns > L: late
		{m(3*time.Minute + 30*time.Second), 3}, // buckets 1..3
		{m(2*time.Minute + 40*time.Second), 5}, // S − t = 50s: buckets 0..2
	}
	// Recompute the expected counts with the model rather than trusting
	// the comments: the point of this test is that both agree on edges.
	log := make([]mrec, len(cases))
	for i, c := range cases {
		log[i] = mrec{key: "k", t: c.t, valid: true}
	}
	want := modelCounts(log, cfg)
	c, err := New(cfg)
	require.NoError(t, err)
	st := newMemState()
	got := make([]int64, len(cases))
	for i := range cases {
		pc := chain.NewContext(chain.ContextOptions{Offset: int64(i), StreamTime: want[i].s, State: st})
		got[i], err = c.Add(context.Background(), pc, "k", cases[i].t)
		require.NoError(t, err)
	}
	var w []int64
	for _, r := range want {
		w = append(w, r.count)
	}
	require.Equal(t, w, got, "the counter agrees with the model")
	for i, c := range cases {
		require.Equal(t, c.want, got[i], "record %d", i)
	}
}

// GetAsOf is Get: the fake holds one stage's writes, and a horizon hides
// only earlier stages' writes.
func (s *memState) GetAsOf(_ int64, key []byte) ([]byte, bool, error) { return s.Get(key) }

// ScanAsOf is Scan or ScanReverse, as GetAsOf is Get.
func (s *memState) ScanAsOf(_ int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) error {
	if reverse {
		return s.ScanReverse(lo, hi, fn)
	}
	return s.Scan(lo, hi, fn)
}
