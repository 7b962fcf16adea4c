package bench

import (
	"cmp"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// expectation is what DESIGN.md "Attribution rules" prescribes for one input (reference.Run over
// each partition's log), and the analytical bound of its cost draws.
type expectation struct {
	recs  []workload.Record
	parts [][]chain.Record
	ends  []int64
	// model checks a design's topics; outputs and invalid index its
	// results for the gate and the tests.
	model   *reference.Expectation
	outputs map[source]reference.Output
	invalid map[source]bool
	bound   Bound
	// paths is what the bounds need of every record, per partition.
	paths [][]pathRecord
	// staged caches stagedTime by (batch size, key order).
	staged map[stagedKey]time.Duration
}

type stagedKey struct {
	batch    int
	keyOrder bool
}

// stagedTime is the micro-batch bound of the expectation's input with
// batches of n records (0: one batch of everything): see stagedTime.
func (e *expectation) stagedTime(n int, keyOrder bool) time.Duration {
	k := stagedKey{n, keyOrder}
	if d, ok := e.staged[k]; ok {
		return d
	}
	d := stagedTime(e.paths, n, e.bound.Workers, keyOrder)
	e.staged[k] = d
	return d
}

// Bound is the analytical lower bound of a run's duration with W workers:
// Time = max(TotalCost / W, LongestChain), where TotalCost sums the cost
// draws of the records a processor runs for (valid, not duplicates) and
// LongestChain is the largest sum of costs of one key within one stage
// (those records run one after another in any correct design: same key,
// same stage, read-modify-write of the same state).
type Bound struct {
	Processed    int           `json:"processed"`
	TotalCost    time.Duration `json:"total_cost_ns"`
	LongestChain time.Duration `json:"longest_chain_ns"`
	// LongestKey sums a key's costs over all stages (for reference; stages
	// of one key may overlap in the chain, so it is not a bound).
	LongestKey time.Duration `json:"longest_key_ns"`
	Workers    int           `json:"workers"`
	Time       time.Duration `json:"time_ns"`
	// ChainOrderPath is the longest path under the chain's own ordering
	// rules with unlimited workers and no engine overhead: a stage begins
	// offset o when its leader has completed every offset below o+1 and (for
	// a record it processes) the leader's watermark exceeds t+Lateness (or
	// the leader is idle: once it finished, and no sooner than IdleTimeout
	// after the run's start — the input is fetched from the start and the
	// engine releases IdleTimeout after the last append), and one key's
	// records of a stage run one after another. ChainOrderTime =
	// max(TotalCost/W, ChainOrderPath) is what the chain could reach at
	// best; Time ≤ ChainOrderTime.
	ChainOrderPath time.Duration `json:"chain_order_path_ns"`
	ChainOrderTime time.Duration `json:"chain_order_time_ns"`
	// KeyOrderPath and KeyOrderTime are the same under the key-scoped gate
	// (keyOrderPath: a follower waits only for its leader's records of the
	// same key); LongestChain ≤ KeyOrderPath ≤ ChainOrderPath.
	KeyOrderPath time.Duration `json:"key_order_path_ns"`
	KeyOrderTime time.Duration `json:"key_order_time_ns"`
}

func newExpectation(recs []workload.Record, partitions, workers int, cfg attribution.Config, idle time.Duration) *expectation {
	e := &expectation{
		recs:    recs,
		parts:   workload.Split(recs, partitions),
		ends:    make([]int64, partitions),
		outputs: map[source]reference.Output{},
		invalid: map[source]bool{},
		paths:   make([][]pathRecord, partitions),
		staged:  map[stagedKey]time.Duration{},
	}
	type chainID struct{ key, typ string }
	chains := map[chainID]time.Duration{}
	keys := map[string]time.Duration{}
	costs := make([]map[int64]time.Duration, partitions)
	for p := range costs {
		costs[p] = map[int64]time.Duration{}
	}
	for i := range recs {
		costs[recs[i].Partition][recs[i].Offset] = recs[i].Cost
	}
	cfg.IdleTimeout = idle // the engine's, for the model's horizons
	e.model = reference.Expect(e.parts, cfg)
	for p, log := range e.parts {
		e.ends[p] = int64(len(log))
		res := e.model.Results()[p]
		for _, o := range res.Installs {
			e.outputs[source{int32(p), o.Offset}] = o
		}
		for _, o := range res.Purchases {
			e.outputs[source{int32(p), o.Offset}] = o
		}
		skip := map[int64]bool{}
		for _, x := range res.Invalid {
			e.invalid[source{int32(p), x.Offset}] = true
			skip[x.Offset] = true
		}
		for _, o := range res.Duplicates {
			skip[o] = true
		}
		path := make([]pathRecord, len(log))
		for i := range log {
			r := &log[i]
			ev, err := reference.Parse(r, cfg)
			if err != nil {
				continue
			}
			path[i] = pathRecord{valid: true, dup: skip[r.Offset], stage: stageIndex(ev.Type), t: ev.Time.UnixNano(), key: string(r.Key)}
			if skip[r.Offset] {
				continue
			}
			c := costs[p][r.Offset]
			path[i].cost = c
			e.bound.Processed++
			e.bound.TotalCost += c
			chains[chainID{string(r.Key), ev.Type}] += c
			keys[string(r.Key)] += c
		}
		e.paths[p] = path
		e.bound.ChainOrderPath = max(e.bound.ChainOrderPath, chainOrderPath(path, cfg.Lateness, idle))
		e.bound.KeyOrderPath = max(e.bound.KeyOrderPath, keyOrderPath(path, cfg.Lateness, idle))
	}
	for _, c := range chains {
		e.bound.LongestChain = max(e.bound.LongestChain, c)
	}
	for _, c := range keys {
		e.bound.LongestKey = max(e.bound.LongestKey, c)
	}
	e.bound.Workers = workers
	e.bound.Time = max(e.bound.TotalCost/time.Duration(workers), e.bound.LongestChain)
	e.bound.ChainOrderTime = max(e.bound.TotalCost/time.Duration(workers), e.bound.ChainOrderPath)
	e.bound.KeyOrderTime = max(e.bound.TotalCost/time.Duration(workers), e.bound.KeyOrderPath)
	return e
}

// pathRecord is what chainOrderPath needs of one record of a partition.
type pathRecord struct {
	valid, dup bool
	stage      int   // index in the chain, -1 none
	t          int64 // event time, unix ns
	key        string
	cost       time.Duration
}

func stageIndex(typ string) int {
	switch typ {
	case attribution.TypeClick:
		return 0
	case attribution.TypeInstall:
		return 1
	case attribution.TypePurchase:
		return 2
	}
	return -1
}

// chainOrderPath is the time the chain's last stage completes one
// partition's log with unlimited workers: see Bound.ChainOrderPath.
func chainOrderPath(log []pathRecord, lateness, idle time.Duration) time.Duration {
	n := len(log)
	if n == 0 {
		return 0
	}
	maxT := watermarks(log)
	prev := make([]time.Duration, n) // leader's prefix completion times
	cur := make([]time.Duration, n)
	for k := range 3 {
		last := map[string]time.Duration{}
		done := time.Duration(0)
		for x := range log {
			r := &log[x]
			gate := time.Duration(0)
			if k > 0 {
				gate = prev[x]
			}
			if r.valid && r.stage == k {
				if k > 0 {
					// The leader's watermark must exceed t+Lateness: its
					// position must pass the first offset whose prefix
					// maximum does; with none, idle release.
					need := r.t + int64(lateness)
					j := firstAbove(maxT, need)
					if j < n {
						gate = max(gate, prev[j])
					} else {
						// Idle release: the leader has completed
						// everything and nothing was appended for idle
						// (the input is fetched from the run's start).
						gate = max(gate, prev[n-1], idle)
					}
				}
				fin := gate
				if !r.dup {
					fin = max(gate, last[r.key]) + r.cost
					last[r.key] = fin
				}
				done = max(done, fin)
			} else {
				done = max(done, gate)
			}
			cur[x] = done
		}
		prev, cur = cur, prev
	}
	return prev[n-1]
}

// stagedTime is the least time a micro-batch of batch size n (0: one batch
// of everything) needs for the partitions' logs with W workers and no
// overhead: batches are taken round-robin across the partitions that have
// records left, one record at a time (the baseline's poll on a backlog);
// within a batch, stage after stage (click, install, purchase), the stage's
// processed records run as tasks — one per key (keyOrder), else one per
// partition (DESIGN.md "The micro-batch baseline") — each task's records one after another, on W
// workers; a stage begins when the batch's previous stage ended, a batch
// when the previous batch ended. A stage of a batch takes at least
// max(its total cost ÷ W, its longest task), so
//
//	stagedTime = Σ over batches Σ over stages max(cost ÷ W, longest task)
//
// It ignores the records the event-time gate holds for the next batch (a
// few per partition and batch).
func stagedTime(paths [][]pathRecord, n, workers int, keyOrder bool) time.Duration {
	total := 0
	for _, p := range paths {
		total += len(p)
	}
	if n <= 0 {
		n = total
	}
	next := make([]int, len(paths))
	var sum time.Duration
	type group struct {
		key  string
		part int
	}
	var cost [3]time.Duration
	var tasks [3]map[group]time.Duration
	for k := range tasks {
		tasks[k] = map[group]time.Duration{}
	}
	for taken := 0; taken < total; {
		for k := range tasks {
			cost[k] = 0
			clear(tasks[k])
		}
		for b := 0; b < n && taken < total; {
			for p := range paths {
				if b >= n || next[p] >= len(paths[p]) {
					continue
				}
				r := &paths[p][next[p]]
				next[p]++
				b++
				taken++
				if !r.valid || r.dup || r.stage < 0 {
					continue
				}
				g := group{part: p}
				if keyOrder {
					g = group{key: r.key}
				}
				cost[r.stage] += r.cost
				tasks[r.stage][g] += r.cost
			}
		}
		for k := range tasks {
			longest := time.Duration(0)
			for _, c := range tasks[k] {
				longest = max(longest, c)
			}
			sum += max(cost[k]/time.Duration(workers), longest)
		}
	}
	return sum
}

// Correctness is the comparison of one design run's output and dead-letter
// topics with the reference model (reference.Check: every output exactly
// once, one key's outputs of a stage in offset order). OK means nothing is
// missing, duplicated, different or unexpected, and every key's outputs of
// a stage are in offset order.
type Correctness struct {
	OK bool `json:"ok"`
	// Outputs and DeadLetters count the records read back.
	Outputs     int `json:"outputs"`
	DeadLetters int `json:"dead_letters"`
	Missing     int `json:"missing"`
	Duplicates  int `json:"duplicates"`
	// Mismatched outputs differ in content; in the latency phase they are
	// tolerated (idle releases while input arrives live), see measure.
	Mismatched int `json:"mismatched"`
	// Unexpected outputs or dead letters are of inputs the model gives
	// none, or name no input.
	Unexpected      int    `json:"unexpected"`
	OrderViolations int    `json:"order_violations"`
	First           string `json:"first_problem,omitempty"`
}

// verify compares outputs and dead letters (read back from a design's topics)
// with the expectation. Every output is identified by its source header, so a
// record whose output appears twice is a duplicate and one whose output is
// absent is lost.
func (e *expectation) verify(outs, dlq map[int32][]*sarama.ConsumerMessage) Correctness {
	r := e.model.Check(reference.FromKafka(outs), reference.FromKafka(dlq),
		reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	o, d := r.Outputs(), r.DeadLetters
	c := Correctness{
		OK:              r.OK(),
		Outputs:         r.OutputsRead,
		DeadLetters:     r.DeadLettersRead,
		Missing:         o.Missing + d.Missing,
		Duplicates:      o.IdenticalDuplicates + o.ConflictingDuplicates + d.IdenticalDuplicates + d.ConflictingDuplicates,
		Mismatched:      o.Mismatched + d.Mismatched,
		Unexpected:      o.Unexpected + d.Unexpected + r.Unattributable,
		OrderViolations: r.OrderViolations,
	}
	if len(r.Problems) > 0 {
		c.First = r.Problems[0]
	}
	return c
}

// watermarks returns maxT: maxT[x] is the largest valid event time at
// offsets <= x, the leader's watermark once its position is past x.
func watermarks(log []pathRecord) []int64 {
	maxT := make([]int64, len(log))
	m := int64(0)
	for x := range log {
		if log[x].valid {
			m = max(m, log[x].t)
		}
		maxT[x] = m
	}
	return maxT
}

// keyMax is, for each key, the running maximum of a per-offset value (the
// leader's completion times) over that key's offsets, in order.
type keyMax[T cmp.Ordered] struct {
	offs map[string][]int // each key's offsets, in order
	max  map[string][]T   // max[u][i]: the largest value among offs[u][:i+1]
}

func newKeyMax[T cmp.Ordered](offs map[string][]int, v []T) keyMax[T] {
	km := keyMax[T]{offs: offs, max: make(map[string][]T, len(offs))}
	for u, xs := range offs {
		m := make([]T, len(xs))
		for i, x := range xs {
			m[i] = v[x]
			if i > 0 {
				m[i] = max(m[i], m[i-1])
			}
		}
		km.max[u] = m
	}
	return km
}

// upTo is the largest value among u's offsets <= lim (zero: none).
func (km keyMax[T]) upTo(u string, lim int) T {
	i, found := slices.BinarySearch(km.offs[u], lim)
	if !found {
		i--
	}
	if i < 0 {
		var zero T
		return zero
	}
	return km.max[u][i]
}

// firstAbove is the first offset j whose prefix maximum maxT[j] (maxT is
// non-decreasing) exceeds need: where a leader's stream time passes need.
// len(maxT) when none does.
func firstAbove(maxT []int64, need int64) int {
	j, _ := slices.BinarySearchFunc(maxT, need, func(a, b int64) int {
		if a <= b {
			return -1
		}
		return 1
	})
	return j
}
