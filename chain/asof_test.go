package chain_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/store"
)

// asOfStore wraps a Store and records the horizon of every as-of read a
// stage makes. With model set it answers those reads itself, from its own
// history of the partition's writes, by StageState's as-of rule (an
// earlier stage's write for a record at an offset >= h is invisible), so
// that the chain side can be checked without the store's implementation;
// without model it passes them to the store.
type asOfStore struct {
	inner chain.Store
	model bool

	mu     sync.Mutex
	hist   map[string][]asOfWrite // key → writes, in write order
	stages map[int]*asOfStage
}

type asOfWrite struct {
	stage   int
	off     int64
	value   []byte
	deleted bool
}

func newAsOfStore(model bool) *asOfStore {
	return &asOfStore{inner: store.NewMemory(), model: model, hist: map[string][]asOfWrite{}, stages: map[int]*asOfStage{}}
}

func (s *asOfStore) OpenPartition(topic string, partition int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.inner.OpenPartition(topic, partition, stages)
	if err != nil {
		return nil, err
	}
	return &asOfPartition{PartitionStore: ps, s: s}, nil
}

// stage returns stage i's handle (the test's one partition).
func (s *asOfStore) stage(i int) *asOfStage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stages[i]
}

type asOfPartition struct {
	chain.PartitionStore
	s *asOfStore
}

func (p *asOfPartition) Stage(i int) chain.StageState {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	st := &asOfStage{StageState: p.PartitionStore.Stage(i), s: p.s, idx: i}
	p.s.stages[i] = st
	return st
}

// asOfStage is one stage's handle. The horizons of its as-of reads since
// the last take are kept for the processor to check (one record at a
// time: no key-parallel workers).
type asOfStage struct {
	chain.StageState
	s   *asOfStore
	idx int

	mu sync.Mutex
	hs []int64
}

func (st *asOfStage) note(h int64) {
	st.mu.Lock()
	st.hs = append(st.hs, h)
	st.mu.Unlock()
}

func (st *asOfStage) take() []int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	hs := st.hs
	st.hs = nil
	return hs
}

func (st *asOfStage) Set(off int64, key, value []byte, expires time.Time) error {
	st.s.mu.Lock()
	st.s.hist[string(key)] = append(st.s.hist[string(key)], asOfWrite{stage: st.idx, off: off, value: bytes.Clone(value)})
	st.s.mu.Unlock()
	return st.StageState.Set(off, key, value, expires)
}

func (st *asOfStage) Delete(off int64, key []byte) error {
	st.s.mu.Lock()
	st.s.hist[string(key)] = append(st.s.hist[string(key)], asOfWrite{stage: st.idx, off: off, deleted: true})
	st.s.mu.Unlock()
	return st.StageState.Delete(off, key)
}

// visible is key's value as of h for this stage, from the history: the
// last write that is this or a later stage's, or for a record below h.
func (st *asOfStage) visible(h int64, key string) ([]byte, bool) {
	ws := st.s.hist[key]
	for i := len(ws) - 1; i >= 0; i-- {
		if w := ws[i]; w.stage >= st.idx || w.off < h {
			return w.value, !w.deleted
		}
	}
	return nil, false
}

func (st *asOfStage) GetAsOf(h int64, key []byte) ([]byte, bool, error) {
	st.note(h)
	if !st.s.model {
		return st.StageState.GetAsOf(h, key)
	}
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	v, ok := st.visible(h, string(key))
	return v, ok, nil
}

func (st *asOfStage) ScanAsOf(h int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) error {
	st.note(h)
	if !st.s.model {
		return st.StageState.ScanAsOf(h, lo, hi, reverse, fn)
	}
	st.s.mu.Lock()
	var keys []string
	vals := map[string][]byte{}
	for k := range st.s.hist {
		if k < string(lo) || hi != nil && k >= string(hi) {
			continue
		}
		if v, ok := st.visible(h, k); ok {
			keys = append(keys, k)
			vals[k] = v
		}
	}
	st.s.mu.Unlock()
	slices.Sort(keys)
	if reverse {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		if !fn([]byte(k), vals[k]) {
			break
		}
	}
	return nil
}

// asOfInput is a log of three keys whose event times rise with ties, go
// back now and then, and hold a few undecodable records (which do not
// move stream time): the horizons of the follower's records land on
// records of their own key, before and after them.
func asOfInput(t0 time.Time) []chain.Record {
	rng := rand.New(rand.NewPCG(7, 9))
	recs := make([]chain.Record, 90)
	s := 0
	for i := range recs {
		s += rng.IntN(2)
		v := ev("e", max(s-rng.IntN(3), 0))
		if i%13 == 12 {
			v = "bad"
		}
		// One Kafka timestamp: the log shows no idle gap; only the tail's
		// is decided (for the records no later event time passes).
		recs[i] = chaintest.Rec("k"+strconv.Itoa(rng.IntN(3)), v, t0)
	}
	return recs
}

// expectedHorizon is H(o) computed from the log alone: the smallest
// leader position the partition gate's rule needs, max(o + distance + 1,
// q(t + lateness)) with q(x) the first offset whose stream time (the
// largest valid event time below it) exceeds x — or, when no record's
// event time exceeds it, the position past the last record, where the
// tail shows the leader idle.
func expectedHorizon(recs []chain.Record, o, distance int64, lateness time.Duration) int64 {
	times := make([]int64, len(recs))
	valid := make([]bool, len(recs))
	for i := range recs {
		d, err := testDecoder.Decode(&recs[i])
		valid[i] = err == nil
		times[i] = d.Time.UnixNano()
	}
	x := times[o] + int64(lateness)
	s := int64(math.MinInt64)
	for q := int64(0); q <= int64(len(recs)); q++ {
		if s > x {
			return max(o+distance+1, q)
		}
		if q < int64(len(recs)) && valid[q] {
			s = max(s, times[q])
		}
	}
	return int64(len(recs))
}

// asOfStages: stage "w" processes every record and overwrites its key's
// value (v/<key> = its offset) and adds h/<key>/<offset>; stage "r", a
// follower, processes every record, reads v/<key> with Get and the
// largest h/<key>/ entry with ScanReverse, and emits both with the
// horizons its reads were made as of. With hold, r's first record waits
// until w processed the last record: the leader is as far ahead as it
// gets.
func asOfStages(st *asOfStore, scope chain.GateScope, last int64, hold bool) []chain.Stage {
	leaderDone := make(chan struct{})
	return []chain.Stage{
		{Name: "w", Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			off := strconv.FormatInt(e.Offset, 10)
			if err := pc.State().Set([]byte("v/"+string(e.Key)), []byte(off), time.Time{}); err != nil {
				return chain.Fatal(err)
			}
			if err := pc.State().Set(fmt.Appendf(nil, "h/%s/%020d", e.Key, e.Offset), []byte(off), time.Time{}); err != nil {
				return chain.Fatal(err)
			}
			if e.Offset >= last {
				close(leaderDone)
			}
			return nil
		})},
		{Name: "r", Gate: scope, Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			if hold {
				select {
				case <-leaderDone:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			get := "-"
			v, ok, err := pc.State().Get([]byte("v/" + string(e.Key)))
			if err != nil {
				return chain.Fatal(err)
			}
			if ok {
				get = string(v)
			}
			scan := "-"
			prefix := "h/" + string(e.Key) + "/"
			err = pc.State().ScanReverse([]byte(prefix), []byte(prefix[:len(prefix)-1]+"0"), func(_, v []byte) bool {
				scan = string(v)
				return false
			})
			if err != nil {
				return chain.Fatal(err)
			}
			pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%d horizon=%d reads=%v get=%s scan=%s",
				e.Offset, pc.Horizon(), st.stage(1).take(), get, scan)})
			return nil
		})},
	}
}

// runAsOf runs the two-stage chain over recs: with the leader as far
// ahead as it gets (a backlog, the follower held until the leader is
// done), or live (records appended one at a time, the follower running as
// soon as its gate lets it). It returns the follower's outputs in offset
// order.
func runAsOf(t *testing.T, recs []chain.Record, model bool, scope chain.GateScope, lateness time.Duration, ahead bool) []string {
	st := newAsOfStore(model)
	last := int64(len(recs) - 1)
	tt := chaintest.New(t, asOfStages(st, scope, last, ahead), testDecoder, chain.WithStore(st),
		chain.WithLateness(lateness), chain.WithIdleTimeout(time.Second))
	if ahead {
		tt.Append(0, recs...)
		tt.Start(0)
	} else {
		tt.Start(0)
		for _, r := range recs {
			tt.Append(0, r)
			time.Sleep(10 * time.Millisecond)
		}
	}
	tt.WaitIdle()
	time.Sleep(2 * time.Second) // the tail's idle release
	tt.WaitIdle()
	require.NoError(t, tt.Stop())
	out := values(tt.Outputs("output"))
	slices.SortFunc(out, func(a, b string) int {
		x, _ := strconv.Atoi(a[:strings.IndexByte(a, ' ')])
		y, _ := strconv.Atoi(b[:strings.IndexByte(b, ' ')])
		return x - y
	})
	return out
}

// expectedAsOf is what the follower emits for every valid record of recs,
// computed from the log: its horizon H, both reads made as of H, and the
// value the leader's latest record of its key below H wrote.
func expectedAsOf(recs []chain.Record, lateness time.Duration) []string {
	var want []string
	for o := range recs {
		if _, err := testDecoder.Decode(&recs[o]); err != nil {
			continue // dead-lettered by the leader, skipped by the follower
		}
		h := expectedHorizon(recs, int64(o), 0, lateness)
		latest := -1
		for j := 0; j < int(min(h, int64(len(recs)))); j++ {
			if _, err := testDecoder.Decode(&recs[j]); err == nil && string(recs[j].Key) == string(recs[o].Key) {
				latest = j
			}
		}
		want = append(want, fmt.Sprintf("%d horizon=%d reads=[%d %d] get=%d scan=%d", o, h, h, h, latest, latest))
	}
	return want
}

// TestFollowerReadsLeaderStateAsOfHorizon: a follower that reads its
// leader's state without comparing offsets or event times gives the same
// outputs whether its leader had run far ahead (a backlog, the follower
// held) or not (live): every read is made as of the record's horizon, the
// smallest leader position the gate's rule needs, so it sees exactly the
// leader's writes of records below it. Against the store's own GetAsOf
// and ScanAsOf; TestFollowerHorizonIsTheGateRulesBound checks the chain's
// side alone.
func TestFollowerReadsLeaderStateAsOfHorizon(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				recs := asOfInput(time.Now())
				want := expectedAsOf(recs, 0)
				ahead := runAsOf(t, recs, false, scope, 0, true)
				live := runAsOf(t, recs, false, scope, 0, false)
				require.Equal(t, want, live, "live")
				require.Equal(t, want, ahead, "the leader far ahead")
			})
		})
	}
}

// TestFollowerHorizonIsTheGateRulesBound: every read a follower makes of
// its leader's state is made as of max(o + OffsetDistance + 1,
// q(t + Lateness)) computed from the log (or the position past the last
// record, at the idle tail) — the same whether the leader ran far ahead
// or not — and with reads answered by StageState's as-of rule (a model of
// it over the writes) the outputs are equal record for record and equal
// to the leader's latest write below that horizon. Both gate scopes, with
// and without lateness.
func TestFollowerHorizonIsTheGateRulesBound(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		for _, lateness := range []time.Duration{0, 2 * time.Second} {
			t.Run(fmt.Sprintf("%s/lateness=%v", scope, lateness), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					recs := asOfInput(time.Now())
					want := expectedAsOf(recs, lateness)
					require.Positive(t, readsPastItself(want), "the input has records whose horizon lets a later write of their key in")
					ahead := runAsOf(t, recs, true, scope, lateness, true)
					live := runAsOf(t, recs, true, scope, lateness, false)
					require.Equal(t, want, live, "live")
					require.Equal(t, want, ahead, "the leader far ahead")
				})
			})
		}
	}
}

// readsPastItself counts the outputs whose read saw the leader's write of
// a later record of the same key (below the horizon).
func readsPastItself(outs []string) int {
	n := 0
	for _, o := range outs {
		var off, h, r1, r2, get, scan int64
		if _, err := fmt.Sscanf(o, "%d horizon=%d reads=[%d %d] get=%d scan=%d", &off, &h, &r1, &r2, &get, &scan); err == nil && get > off {
			n++
		}
	}
	return n
}

// TestRestartedFollowerHorizonWaitsForTheStreamTimeStep: a restart
// resumes the leader past the whole log and the follower at offset 1, the
// leader's state holding its writes of every record. The gate passes at
// once (the leader's restored checkpoint), before the fetcher has read
// the record whose event time exceeds the follower's record's: its
// horizon is not known yet, and the follower waits for the fetcher rather
// than read as of a guess. Every read is then made as of the horizon the
// log gives, as in a run without the restart.
func TestRestartedFollowerHorizonWaitsForTheStreamTimeStep(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				recs := []chain.Record{
					chaintest.Rec("k0", ev("e", 5), t0), // 0
					chaintest.Rec("k1", ev("e", 5), t0), // 1: q(5) = 5
					chaintest.Rec("k0", ev("e", 5), t0), // 2
					chaintest.Rec("k1", ev("e", 4), t0), // 3
					chaintest.Rec("k1", ev("e", 6), t0), // 4
					chaintest.Rec("k1", ev("e", 6), t0), // 5
					chaintest.Rec("k0", ev("e", 9), t0), // 6
				}
				st := newAsOfStore(true)
				// The earlier run's writes of the leader: every record.
				for o, r := range recs {
					off := []byte(strconv.Itoa(o))
					st.hist["v/"+string(r.Key)] = append(st.hist["v/"+string(r.Key)], asOfWrite{stage: 0, off: int64(o), value: off})
					st.hist[fmt.Sprintf("h/%s/%020d", r.Key, o)] = []asOfWrite{{stage: 0, off: int64(o), value: off}}
				}
				tt := chaintest.New(t, asOfStages(st, scope, math.MaxInt64, false), testDecoder, chain.WithStore(st),
					chain.WithIdleTimeout(time.Second))
				last, err := testDecoder.Decode(&recs[len(recs)-1])
				require.NoError(t, err)
				first, err := testDecoder.Decode(&recs[0])
				require.NoError(t, err)
				md, err := commit.EncodeState(1, commit.State{Changelog: commit.NoChangelog, Stages: []commit.Checkpoint{
					{Stage: "w", Next: int64(len(recs)), Watermark: last.Time.UnixNano()},
					{Stage: "r", Next: 1, Watermark: first.Time.UnixNano()},
				}})
				require.NoError(t, err)
				tt.SetCommit(0, chaintest.Commit{Offset: 1, Metadata: md})

				tt.Append(0, recs[:4]...) // record 1's next record is there, its q is not
				tt.Start(0)
				synctest.Wait()
				require.Empty(t, values(tt.Outputs("output")), "the follower waits for the record past q(t + Lateness)")
				tt.Append(0, recs[4:]...)
				tt.WaitIdle()
				time.Sleep(2 * time.Second) // the tail's idle release
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				got := values(tt.Outputs("output"))
				slices.SortFunc(got, func(a, b string) int { return strings.Compare(a, b) })
				require.Equal(t, expectedAsOf(recs, 0)[1:], got)
			})
		})
	}
}

// TestFollowerReadsAsOfHorizonAcrossARestart: the leader runs the whole
// log and checkpoints while its follower is held a third of the way in;
// the partition stops there (the follower's held record is abandoned) and
// starts again on the same store, the leader resuming at its end and the
// follower where it stopped. The follower's reads after the restart come
// from the persisted state, in which the leader overwrote every key long
// after the follower's records: they must still be made as of each
// record's horizon. Every output (first copies and any repeat) equals the
// value of the leader's latest write of the key below the record's
// horizon, computed from the log.
func TestFollowerReadsAsOfHorizonAcrossARestart(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				recs := asOfInput(time.Now())
				cut := int64(len(recs) / 3)
				var held atomic.Bool
				held.Store(true)
				leaderDone := make(chan struct{})
				stages := []chain.Stage{
					{Name: "w", Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
						if err := pc.State().Set([]byte("v/"+string(e.Key)), strconv.AppendInt(nil, e.Offset, 10), time.Time{}); err != nil {
							return chain.Fatal(err)
						}
						if e.Offset == int64(len(recs)-1) {
							close(leaderDone)
						}
						return nil
					})},
					{Name: "r", Gate: scope, Processor: chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
						if held.Load() {
							if e.Offset == 0 {
								<-leaderDone // the leader as far ahead as it gets
							}
							if e.Offset >= cut {
								<-ctx.Done() // abandoned by the stop
								return ctx.Err()
							}
						}
						got := "-"
						v, ok, err := pc.State().Get([]byte("v/" + string(e.Key)))
						if err != nil {
							return chain.Fatal(err)
						}
						if ok {
							got = string(v)
						}
						pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%d get=%s", e.Offset, got)})
						return nil
					})},
				}
				tt := chaintest.New(t, stages, testDecoder, chain.WithStore(store.NewMemory()),
					chain.WithIdleTimeout(time.Second), chain.WithCommitInterval(100*time.Millisecond))
				tt.Append(0, recs...)
				tt.Start(0)
				<-leaderDone
				time.Sleep(time.Second) // checkpoints with the leader at the end
				// The held record outlasts the shutdown timeout: abandoned,
				// not committed.
				require.ErrorIs(t, tt.Stop(), chain.ErrShutdownTimeout)
				before := len(tt.Outputs("output"))
				require.Less(t, before, len(recs)-int(cut), "the follower stopped a third of the way in")

				held.Store(false)
				tt.Start(0)
				tt.WaitIdle()
				time.Sleep(2 * time.Second) // the tail's idle release
				tt.WaitIdle()
				require.NoError(t, tt.Stop())

				want := map[int64]string{}
				for o := range recs {
					if _, err := testDecoder.Decode(&recs[o]); err != nil {
						continue
					}
					h := expectedHorizon(recs, int64(o), 0, 0)
					latest := "-"
					for j := 0; j < int(min(h, int64(len(recs)))); j++ {
						if _, err := testDecoder.Decode(&recs[j]); err == nil && string(recs[j].Key) == string(recs[o].Key) {
							latest = strconv.Itoa(j)
						}
					}
					want[int64(o)] = fmt.Sprintf("%d get=%s", o, latest)
				}
				seen := map[int64]bool{}
				for _, v := range values(tt.Outputs("output")) {
					o, err := strconv.ParseInt(v[:strings.IndexByte(v, ' ')], 10, 64)
					require.NoError(t, err)
					require.Equal(t, want[o], v, "offset %d", o)
					seen[o] = true
				}
				require.Len(t, seen, len(want), "every valid record has an output")
			})
		})
	}
}
