package chain_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testutil"
)

// Test records have values "type|eventTimeSeconds" ("bad" is invalid).
var base = testutil.Base

func ev(typ string, sec int) string { return fmt.Sprintf("%s|%d", typ, sec) }

var testDecoder = testutil.Decoder

func typeFilter(typ string) func(*chain.Event) bool {
	return func(e *chain.Event) bool { return e.Type == typ }
}

// recorder counts processor invocations per (stage, offset) and keeps the
// order each stage processed offsets in.
type recorder struct {
	mu    sync.Mutex
	calls map[string]map[int64]int
	order map[string][]int64
	byKey map[string]map[string][]int64
}

func newRecorder() *recorder {
	return &recorder{calls: map[string]map[int64]int{}, order: map[string][]int64{}, byKey: map[string]map[string][]int64{}}
}

func (r *recorder) note(stage string, key []byte, o int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls[stage] == nil {
		r.calls[stage] = map[int64]int{}
		r.byKey[stage] = map[string][]int64{}
	}
	r.calls[stage][o]++
	r.order[stage] = append(r.order[stage], o)
	r.byKey[stage][string(key)] = append(r.byKey[stage][string(key)], o)
}

// callsOf returns a copy of stage's calls per offset, taken under the lock
// (processors may still run).
func (r *recorder) callsOf(stage string) map[int64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int{}
	for o, c := range r.calls[stage] {
		out[o] = c
	}
	return out
}

// proc returns a processor that records the call, optionally waits (fake
// time under synctest) and emits one output naming the stage and offset.
func (r *recorder) proc(emit bool, cost func(o int64) time.Duration) chain.Processor {
	return chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		if cost != nil {
			if d := cost(e.Offset); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			}
		}
		r.note(pc.Stage(), e.Key, e.Offset)
		if emit {
			pc.Emit(chain.Message{Key: e.Key, Value: []byte(fmt.Sprintf("%s@%d", pc.Stage(), e.Offset))})
		}
		return nil
	})
}

func threeStages(r *recorder, emit bool, keyConc int, cost func(o int64) time.Duration) []chain.Stage {
	return []chain.Stage{
		{Name: "click", Filter: typeFilter("click"), Processor: r.proc(emit, cost), KeyConcurrency: keyConc},
		{Name: "install", Filter: typeFilter("install"), Processor: r.proc(emit, cost), KeyConcurrency: keyConc},
		{Name: "purchase", Filter: typeFilter("purchase"), Processor: r.proc(emit, cost), KeyConcurrency: keyConc},
	}
}

// invariantObserver checks I1 at every begin: a follower begins offset o
// only when its leader's position is > o + d (or > o when the leader is
// idle), and processes event time t only when the leader's watermark is
// > t + lateness unless idle. It also checks positions never decrease.
type invariantObserver struct {
	t        testing.TB
	d        int64
	lateness time.Duration

	mu     sync.Mutex
	begun  map[int][]int64
	next   map[int]int64
	idles  int
	errs   []string
	commit int64
}

func newInvariantObserver(t testing.TB, d int64, lateness time.Duration) *invariantObserver {
	return &invariantObserver{t: t, d: d, lateness: lateness, begun: map[int][]int64{}, next: map[int]int64{}, commit: -1}
}

func (o *invariantObserver) Begin(b chain.BeginInfo) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.begun[b.Stage] = append(o.begun[b.Stage], b.Offset)
	if b.Stage == 0 {
		return
	}
	if b.Idle {
		o.idles++
		if b.LeaderNext <= b.Offset {
			o.errs = append(o.errs, fmt.Sprintf("I1: stage %d began %d with leader at %d (idle)", b.Stage, b.Offset, b.LeaderNext))
		}
		return
	}
	if b.LeaderNext <= b.Offset+o.d {
		o.errs = append(o.errs, fmt.Sprintf("I1: stage %d began %d with leader at %d, distance %d", b.Stage, b.Offset, b.LeaderNext, o.d))
	}
	if b.Processing && !b.LeaderWatermark.After(b.EventTime.Add(o.lateness)) {
		o.errs = append(o.errs, fmt.Sprintf("gate: stage %d processed %d (t=%v) with leader watermark %v, lateness %v",
			b.Stage, b.Offset, b.EventTime, b.LeaderWatermark, o.lateness))
	}
}

func (o *invariantObserver) Advanced(_ string, _ int32, stage int, next int64, _ time.Time) {}

func (o *invariantObserver) Committed(_ string, _ int32, off int64, _ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if off < o.commit {
		o.errs = append(o.errs, fmt.Sprintf("I3: commit went backwards %d -> %d", o.commit, off))
	}
	o.commit = off
}

func (o *invariantObserver) check() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) > 0 {
		o.t.Fatalf("%d invariant violations, first: %s", len(o.errs), o.errs[0])
	}
}

// completionChecker is an invariantObserver that also hears every
// completion (chain.CompletionObserver) and checks I1 against them, not
// against what the engine reports: a follower begins offset o only once
// its leader has really completed every offset up to o + d (up to o when
// idle). For runs that start at offset 0 without restarts.
type completionChecker struct {
	*invariantObserver
	prefix map[int]int64 // per stage: every offset below it is complete
	done   map[int]map[int64]bool
}

func newCompletionChecker(t testing.TB, d int64, lateness time.Duration) *completionChecker {
	return &completionChecker{invariantObserver: newInvariantObserver(t, d, lateness), prefix: map[int]int64{}, done: map[int]map[int64]bool{}}
}

func (c *completionChecker) Completed(_ string, _ int32, stage int, off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done[stage] == nil {
		c.done[stage] = map[int64]bool{}
	}
	c.done[stage][off] = true
	for c.done[stage][c.prefix[stage]] {
		delete(c.done[stage], c.prefix[stage])
		c.prefix[stage]++
	}
}

func (c *completionChecker) Begin(b chain.BeginInfo) {
	c.invariantObserver.Begin(b)
	if b.Stage == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	need := b.Offset + c.d
	if b.Idle {
		need = b.Offset
	}
	if done := c.prefix[b.Stage-1]; done <= need {
		c.errs = append(c.errs, fmt.Sprintf("I1: stage %d began %d while its leader had completed only up to %d (reported %d, idle %v)",
			b.Stage, b.Offset, done, b.LeaderNext, b.Idle))
	}
	if b.LeaderNext > c.prefix[b.Stage-1] {
		c.errs = append(c.errs, fmt.Sprintf("stage %d began %d reporting leader position %d, above its completed prefix %d",
			b.Stage, b.Offset, b.LeaderNext, c.prefix[b.Stage-1]))
	}
}

func seq(from, to int64) []int64 {
	out := make([]int64, 0, to-from)
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// Exactly-once mode with the key-scoped gate (DESIGN.md "Exactly-once with
// the key-scoped gate"): a cycle pauses the stages while a key-scoped
// follower holds begun records waiting in its gate for its leader's
// progress on their keys; the drain must release them (their leader
// records were begun, so they finish), not wait for ever.

// hotKey is the key whose records the leader processes slowly.
const hotKey = "hot"

// hotStages is a three-stage chain — click → install → purchase, each
// following its leader with the key-scoped gate — whose processors keep a
// per-key count in state and emit "stage@offset key=count". The first
// stage (key-parallel, so other keys pass the hot one) takes slow for the
// hot key's records; calls counts every processing.
func hotStages(slow time.Duration, calls *callCounter) []chain.Stage {
	stage := func(name, typ string, conc int, cost func(e *chain.Event) time.Duration) chain.Stage {
		return chain.Stage{Name: name, Filter: typeFilter(typ), KeyConcurrency: conc, Gate: chain.GateKey,
			Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
				calls.add()
				if d := cost(e); d > 0 {
					time.Sleep(d)
				}
				k := append([]byte(name+"/"), e.Key...)
				prev, _, err := pc.State().Get(k)
				if err != nil {
					return err
				}
				n, _ := strconv.Atoi(string(prev))
				if err := pc.State().Set(k, strconv.AppendInt(nil, int64(n+1), 10), time.Time{}); err != nil {
					return err
				}
				pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s@%d %s=%d", name, e.Offset, e.Key, n+1)})
				return nil
			})}
	}
	stages := []chain.Stage{
		stage("click", "click", 4, func(e *chain.Event) time.Duration {
			if string(e.Key) == hotKey {
				return slow
			}
			return time.Duration(e.Offset%3) * time.Millisecond
		}),
		stage("install", "install", 2, func(e *chain.Event) time.Duration { return time.Duration(e.Offset%2) * time.Millisecond }),
		stage("purchase", "purchase", 1, func(*chain.Event) time.Duration { return 0 }),
	}
	stages[0].Gate = chain.GatePartition // the first stage has no leader
	return stages
}

// hotModel is what hotStages must output for a log, sorted.
func hotModel(recs []chain.Record) map[string]int {
	counts := map[string]int{}
	out := map[string]int{}
	for _, r := range recs {
		typ, _, _ := strings.Cut(string(r.Value), "|")
		k := typ + "/" + string(r.Key)
		counts[k]++
		out[fmt.Sprintf("%s@%d %s=%d", typ, r.Offset, r.Key, counts[k])]++
	}
	return out
}

// hotRecords returns n records from offset from: every fourth is the hot
// key's, the others spread over ten keys; each key goes click, install,
// purchase, click, … with event times in offset order.
func hotRecords(from, n int) []chain.Record {
	types := []string{"click", "install", "purchase"}
	recs := make([]chain.Record, n)
	for i := range recs {
		o := from + i
		key, idx := hotKey, o/4
		if o%4 != 0 {
			key, idx = fmt.Sprintf("u%d", o%10), o/10
		}
		recs[i] = chaintest.Rec(key, ev(types[idx%3], o), base)
	}
	return recs
}

// visible counts the outputs read_committed readers see.
func visible(tt *chaintest.Tester) map[string]int {
	out := map[string]int{}
	for _, m := range tt.Outputs("output") {
		out[string(m.Value)]++
	}
	return out
}

// callCounter counts processor calls, all stages together.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) add() { c.n.Add(1) }

func (c *callCounter) total() int64 { return c.n.Load() }

// requireTxnPrefixes checks every committed transaction of a chain whose
// outputs are "stage@offset …" (stageOf maps a record type to the stage
// that processes it; nil: the stage is named as the type): it holds exactly
// the outputs of the records between the previous commit's position and
// this one's, per stage, and every output is committed once. It returns
// how many transactions and outputs it checked.
func requireTxnPrefixes(t *testing.T, tt *chaintest.Tester, x *chaintest.Transactor, names []string, stageOf map[string]string) (txns, outputs int) {
	t.Helper()
	prev := map[string]int64{}
	seen := map[string]int{}
	all := x.Transactions()
	for i, txn := range all {
		if len(txn.Offsets) == 0 {
			continue
		}
		require.Len(t, txn.Offsets, 1)
		st, ok := commit.DecodeState(txn.Offsets[0].Metadata, txn.Offsets[0].Offset, names)
		require.True(t, ok)
		next := map[string]int64{}
		for _, cp := range st.Stages {
			next[cp.Stage] = cp.Next
		}
		want := map[string]bool{}
		for _, r := range tt.Log(0).Records() {
			stage, _, _ := strings.Cut(string(r.Value), "|")
			if stageOf != nil {
				stage = stageOf[stage]
			}
			if r.Offset >= prev[stage] && r.Offset < next[stage] {
				want[fmt.Sprintf("%s@%d", stage, r.Offset)] = true
			}
		}
		got := map[string]bool{}
		for _, m := range txn.Outputs {
			id, _, _ := strings.Cut(string(m.Value), " ")
			got[id] = true
			seen[id]++
		}
		require.Equal(t, want, got, "transaction %d holds exactly the outputs of [previous position, position) per stage", i)
		prev = next
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "output %s committed once", id)
	}
	return len(all), len(seen)
}

// hotShutdown is the shutdown timeout of the hot-key runs: a drain that
// waits it out aborts its cycle.
const hotShutdown = 10 * time.Second

// hotRun runs hotStages (the hot key 40 ms a record in the leader) in
// exactly-once mode over n records appended in chunks of 50, 4 ms apart
// (fake time), calling each(i) after the chunk at i, until every stage
// completed the log and the commit covers it.
func hotRun(t *testing.T, n int, each func(tt *chaintest.Tester, x *chaintest.Transactor, i int)) (*chaintest.Tester, *chaintest.Transactor, *callCounter) {
	t.Helper()
	calls := new(callCounter)
	tt, x, _ := exactlyOnceTester(t, hotStages(40*time.Millisecond, calls),
		chain.WithCommitInterval(5*time.Millisecond), chain.WithShutdownTimeout(hotShutdown))
	tt.SetAckMode(chaintest.AckAsync)
	tt.Start(0)
	recs := hotRecords(0, n)
	for i := 0; i < n; i += 50 {
		tt.Append(0, recs[i:i+50]...)
		time.Sleep(4 * time.Millisecond)
		if each != nil {
			each(tt, x, i)
		}
	}
	tt.WaitIdle()
	tt.WaitCommitted(0, int64(n))
	return tt, x, calls
}
