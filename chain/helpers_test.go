package chain_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
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
