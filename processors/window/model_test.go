package window

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// This file is the brute-force model of the package doc's rule, written
// from the rule's text and sharing no code with Counter: every count is a
// scan of the whole log so far.

// mrec is one record of a model log: valid records have a key and a time;
// invalid ones (decode errors) do not move the stream time.
type mrec struct {
	key   string
	t     time.Time
	valid bool
}

// mresult is the model's outcome for one record.
type mresult struct {
	s     time.Time // S(o)
	late  bool
	count int64 // 0 for late and invalid records
}

// modelCounts applies the rule to log (offsets 0..n-1).
func modelCounts(log []mrec, cfg Config) []mresult {
	cfg = cfg.withDefaults()
	q := func(t time.Time) int64 { return t.UnixNano() / int64(cfg.Bucket) * int64(cfg.Bucket) }
	out := make([]mresult, len(log))
	var s time.Time
	counted := make([]bool, len(log))
	for i, r := range log {
		out[i].s = s
		if !r.valid {
			continue
		}
		if !s.IsZero() && s.Sub(r.t) > cfg.Lateness {
			out[i].late = true
		} else {
			counted[i] = true
			lo, hi := q(r.t)-int64(cfg.Window), q(r.t)
			for j := 0; j <= i; j++ {
				if counted[j] && log[j].key == r.key && q(log[j].t) > lo && q(log[j].t) <= hi {
					out[i].count++
				}
			}
		}
		if r.t.After(s) {
			s = r.t
		}
	}
	return out
}

// modelBuckets is the counted records of each key per bucket start, over
// the whole log, keeping only the buckets still countable at stream time
// at (b + Window + Lateness > at).
func modelBuckets(log []mrec, res []mresult, cfg Config, at time.Time) map[string]map[int64]int64 {
	cfg = cfg.withDefaults()
	out := map[string]map[int64]int64{}
	for i, r := range log {
		if !r.valid || res[i].late {
			continue
		}
		b := r.t.UnixNano() / int64(cfg.Bucket) * int64(cfg.Bucket)
		if b+int64(cfg.Window+cfg.Lateness) <= at.UnixNano() {
			continue
		}
		if out[r.key] == nil {
			out[r.key] = map[int64]int64{}
		}
		out[r.key][b]++
	}
	return out
}

// genConfig draws a counter configuration: a window of 1–12 buckets, a
// lateness of 0 to 3 windows (not always a bucket multiple).
func genConfig(rng *rand.Rand) Config {
	bucket := []time.Duration{time.Second, time.Minute, 7 * time.Millisecond, 1}[rng.IntN(4)]
	w := bucket * time.Duration(1+rng.IntN(12))
	var late time.Duration
	switch rng.IntN(4) {
	case 0:
	case 1:
		late = w
	default:
		late = time.Duration(rng.Int64N(int64(3*w) + 1))
	}
	return Config{Name: "n", Window: w, Bucket: bucket, Lateness: late}
}

var base = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// genLog draws n records over keys: times mostly move forward by about a
// bucket, with records out of order (up to twice the window plus the
// lateness back: inside and outside the lateness), exact bucket edges,
// forward jumps past the window, and some invalid records.
func genLog(rng *rand.Rand, cfg Config, n, keys int) []mrec {
	cfg = cfg.withDefaults()
	b := cfg.Bucket
	log := make([]mrec, n)
	cur := base
	for i := range log {
		r := &log[i]
		r.key = fmt.Sprintf("k%d", min(rng.IntN(keys), rng.IntN(keys))) // skewed to small ids
		r.valid = rng.IntN(20) != 0
		switch x := rng.IntN(100); {
		case x < 50:
			cur = cur.Add(time.Duration(rng.Int64N(int64(b) + 1)))
			r.t = cur
		case x < 65:
			cur = cur.Add(b)
			r.t = cur.Truncate(b) // a bucket edge
		case x < 90:
			back := time.Duration(rng.Int64N(int64(2*cfg.Window+cfg.Lateness) + 1))
			r.t = cur.Add(-back)
		case x < 95:
			r.t = cur.Add(-cfg.Lateness - time.Duration(rng.Int64N(2))) // at the lateness edge
		case x < 98:
			cur = cur.Add(cfg.Window + time.Duration(rng.Int64N(int64(cfg.Window))))
			r.t = cur
		default:
			r.t = cur.Add(time.Duration(rng.Int64N(int64(cfg.Window) + 1))) // ahead of the stream
		}
	}
	return log
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
