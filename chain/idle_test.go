package chain_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testutil"
)

// clickBook is a minimal attribution: the click stage notes each user's
// clicks, the install stage emits the offset of the user's latest click at
// or before the install's event time. An install the gate lets through
// before a late click (within the lateness) was processed names an older
// click, or none: a wrong result, as in issue's bench and e2e runs.
type clickBook struct {
	mu     sync.Mutex
	clicks map[string][]click
}

type click struct {
	t   time.Time
	off int64
}

// attribute is the user's latest click at or before t among clicks.
func attribute(clicks []click, t time.Time) string {
	best := click{off: -1}
	for _, c := range clicks {
		if !c.t.After(t) && (best.off < 0 || c.t.After(best.t) || c.t.Equal(best.t) && c.off > best.off) {
			best = c
		}
	}
	if best.off < 0 {
		return "none"
	}
	return fmt.Sprint(best.off)
}

func clickInstallStages(b *clickBook, scope chain.GateScope) []chain.Stage {
	return []chain.Stage{
		{Name: "click", Filter: typeFilter("click"), Processor: chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.clicks[string(e.Key)] = append(b.clicks[string(e.Key)], click{e.Time, e.Offset})
			return nil
		})},
		{Name: "install", Filter: typeFilter("install"), Gate: scope, Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "install@%d<-%s", e.Offset, attribute(b.clicks[string(e.Key)], e.Time))})
			return nil
		})},
	}
}

// model is what clickInstallStages must produce for the whole log: every
// click of the user counts, however late it is in the log.
func model(recs []chain.Record) []string {
	clicks := map[string][]click{}
	for _, r := range recs {
		d, err := testDecoder.Decode(&r)
		if err == nil && d.Type == "click" {
			clicks[string(r.Key)] = append(clicks[string(r.Key)], click{d.Time, r.Offset})
		}
	}
	var out []string
	for _, r := range recs {
		d, err := testDecoder.Decode(&r)
		if err == nil && d.Type == "install" {
			out = append(out, fmt.Sprintf("install@%d<-%s", r.Offset, attribute(clicks[string(r.Key)], d.Time)))
		}
	}
	return out
}

func outputValues(msgs []chain.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, string(m.Value))
	}
	slices.Sort(out)
	return out
}

const (
	idleTestTimeout  = 200 * time.Millisecond
	idleTestLateness = 30 * time.Second
)

func newIdleTester(t *testing.T, scope chain.GateScope) (*chaintest.Tester, *clickBook) {
	b := &clickBook{clicks: map[string][]click{}}
	tt := chaintest.New(t, clickInstallStages(b, scope), testDecoder,
		chain.WithIdleTimeout(idleTestTimeout), chain.WithLateness(idleTestLateness), chain.WithCommitInterval(time.Second))
	return tt, b
}

// TestIdleReleaseWaitsForAStalledFetcher: the click stage has completed
// everything the partition fetched and nothing was fetched for many idle
// timeouts, but the log holds more records the fetcher has not delivered
// (its high watermark is beyond them): among them a late click the install
// must see. The install stage must stay gated — the leader is stalled, not
// idle — and Stats must show the click stage's lag; once the records
// arrive the outputs equal the model. An idle release that did not wait
// for the log's confirmation would let the install through after one idle
// timeout, attributed to no click.
func TestIdleReleaseWaitsForAStalledFetcher(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt, _ := newIdleTester(t, scope)
				tt.Start(0)
				log := tt.Log(0)
				// install (t=10s) at 0: its click (t=5s) comes later in the log, within the lateness.
				tt.Append(0, chaintest.Rec("u", ev("install", 10), base))
				synctest.Wait() // fetched; the install stage is gated (the click stage's watermark is not past 40s)
				log.StallFetch()
				tt.Append(0, chaintest.Rec("u", ev("click", 5), base), chaintest.Rec("v", ev("click", 100), base))
				time.Sleep(20 * idleTestTimeout)
				synctest.Wait()

				require.Empty(t, tt.Outputs("output"), "the install was released while its leader was stalled behind the log")
				ps := tt.Stats()
				require.Len(t, ps, 1)
				require.Equal(t, int64(3), ps[0].HighWatermark)
				require.Equal(t, int64(0), ps[0].Stages[1].IdleReleases)
				require.Equal(t, int64(2), ps[0].Stages[0].Lag, "a stalled leader shows its lag")
				require.Positive(t, log.EndChecks(), "the idle deadline passed: the log's end was checked")

				log.ResumeFetch()
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				require.Equal(t, model(log.Records()), outputValues(tt.Outputs("output")))
				require.Equal(t, []string{"install@0<-1"}, model(log.Records()))
			})
		})
	}
}

// TestIdleReleaseAtATransactionalTail: the log ends with offsets the
// fetcher never delivers — a commit marker, then an aborted transaction's
// records and its marker (chaintest's Skip) — so its high watermark stays
// above the last record for ever. The leader is idle there: the install
// waiting for it is released after the idle timeout (it can be released by
// nothing else), with the right result, and once the tail was confirmed no
// stage shows lag. A stall first (records in the log, not fetched) holds
// the install until they arrive.
func TestIdleReleaseAtATransactionalTail(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt, _ := newIdleTester(t, scope)
				tt.Start(0)
				log := tt.Log(0)
				tt.Append(0, chaintest.Rec("u", ev("click", 1), base), chaintest.Rec("u", ev("install", 10), base))
				synctest.Wait()
				log.StallFetch()
				tt.Append(0, chaintest.Rec("u", ev("click", 5), base)) // late click, at 2
				log.Skip(1)                                            // its transaction's commit marker, 3
				time.Sleep(20 * idleTestTimeout)
				synctest.Wait()
				require.Empty(t, tt.Outputs("output"), "released while the late click was in the log, unfetched")

				log.ResumeFetch()
				tt.Append(0, chaintest.Rec("w", ev("install", 50), base)) // 4, a transaction aborted below
				log.Skip(4)                                               // aborted records 5-7 and the abort marker 8
				tt.WaitIdle()                                             // only the idle release can let the installs through
				require.Equal(t, []string{"install@1<-2", "install@4<-none"}, outputValues(tt.Outputs("output")))
				require.Equal(t, model(log.Records()), outputValues(tt.Outputs("output")))

				ps := tt.Stats()
				require.Len(t, ps, 1)
				require.Equal(t, int64(9), ps[0].HighWatermark)
				require.Positive(t, ps[0].Stages[1].IdleReleases)
				for _, s := range ps[0].Stages {
					require.Equal(t, int64(5), s.Position, s.Name)
					require.Equal(t, int64(0), s.Lag, "stage %s: markers and aborted records are no lag", s.Name)
				}
				require.NoError(t, tt.Stop())
			})
		})
	}
}

// TestLagAtAQuietTail: a one-stage chain has no follower to ask whether
// the log's tail is only markers, so the commit loop asks once the
// partition has been quiet for the idle timeout with the high watermark
// beyond what was fetched: a tail of markers and aborted records is then no
// lag, and records in the log that a stalled fetcher has not delivered
// are. Before the check the lag at the marker stayed 1 for ever.
func TestLagAtAQuietTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		tt := chaintest.New(t, []chain.Stage{{Name: "only", Processor: r.proc(false, nil)}}, testDecoder,
			chain.WithIdleTimeout(idleTestTimeout), chain.WithCommitInterval(time.Second))
		tt.Start(0)
		log := tt.Log(0)
		lag := func() int64 {
			ps := tt.Stats()
			require.Len(t, ps, 1)
			return ps[0].Stages[0].Lag
		}
		tt.Feed(0, chaintest.Rec("u", ev("click", 1), base), chaintest.Rec("u", ev("click", 2), base))
		log.Skip(3) // a commit marker, an aborted record and its marker
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(0), lag(), "markers and aborted records are no lag")
		require.Equal(t, 1, log.EndChecks(), "asked once for this end")

		log.StallFetch()
		tt.Append(0, chaintest.Rec("u", ev("click", 3), base), chaintest.Rec("u", ev("click", 4), base))
		log.Skip(1)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(3), lag(), "records the stalled fetcher has not delivered (and their marker) are lag")
		log.ResumeFetch()
		tt.WaitIdle()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(0), lag())
		require.NoError(t, tt.Stop())
	})
}

// horizonStages is clickInstallStages whose install reads only the clicks
// below its Context.Horizon, and notes the horizon in its output.
func horizonStages(b *clickBook, scope chain.GateScope) []chain.Stage {
	return []chain.Stage{
		{Name: "click", Filter: typeFilter("click"), Processor: chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.clicks[string(e.Key)] = append(b.clicks[string(e.Key)], click{e.Time, e.Offset})
			return nil
		})},
		{Name: "install", Filter: typeFilter("install"), Gate: scope, Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			var below []click
			for _, c := range b.clicks[string(e.Key)] {
				if c.off < pc.Horizon() {
					below = append(below, c)
				}
			}
			h := "none"
			if pc.Horizon() != math.MaxInt64 {
				h = fmt.Sprint(pc.Horizon())
			}
			pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "install@%d<-%s as of %s", e.Offset, attribute(below, e.Time), h)})
			return nil
		})},
	}
}

// The idle release is decided from the log: an install whose late click
// (within the lateness) comes after a gap in the Kafka timestamps longer
// than the idle timeout is processed as of the position past the gap —
// without that click — whether the gap happens live (the tail goes quiet,
// the install is released, the click arrives later) or is read from a
// backlog in which the click is already there (and the leader's position
// passes it before the install runs). Records without a gap after them
// are processed as of no horizon. Both gate scopes, at-least-once.
func TestIdleReleaseIsDecidedOverTheLog(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const idle = 200 * time.Millisecond
				t0 := time.Now()
				at := func(d time.Duration) time.Time { return t0.Add(d) }
				first := []chain.Record{
					chaintest.Rec("u1", ev("click", 0), at(0)),       // 0
					chaintest.Rec("u1", ev("install", 10), at(0)),    // 1: waits for wm > 70 s
					chaintest.Rec("u2", ev("click", 11), at(0)),      // 2
					chaintest.Rec("u2", ev("install", 12), at(0)),    // 3: waits too
					chaintest.Rec("u1", ev("click", 5), at(0)),       // 4: late click of u1, before the gap
					chaintest.Rec("u2", ev("click", 12), at(idle/2)), // 5: no gap before it
				}
				late := []chain.Record{
					chaintest.Rec("u1", ev("click", 8), at(time.Second)),   // 6: after a 1 s gap
					chaintest.Rec("u1", ev("click", 100), at(time.Second)), // 7: passes every lateness
				}
				want := []string{"install@1<-4 as of 6", "install@3<-5 as of 6"}
				opts := []chain.Option{chain.WithIdleTimeout(idle), chain.WithLateness(time.Minute)}

				// Live: the tail goes quiet after offset 5 and the installs are
				// released there; the late click comes after.
				b := &clickBook{clicks: map[string][]click{}}
				tt := chaintest.New(t, horizonStages(b, scope), testDecoder, opts...)
				tt.Start(0)
				tt.Append(0, first...)
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, want, values(tt.Outputs("output")), "live: released at the quiet tail, as of the position past it")
				tt.Append(0, late...)
				tt.WaitIdle()
				require.Positive(t, idleReleases(tt), "released by idleness")
				require.NoError(t, tt.Stop())
				require.ElementsMatch(t, want, values(tt.Outputs("output")))

				// The same log as a backlog: the leader can be far past the
				// late click when the installs run; they still do not see it.
				b2 := &clickBook{clicks: map[string][]click{}}
				tb := chaintest.New(t, horizonStages(b2, scope), testDecoder, opts...)
				tb.Append(0, tt.Log(0).Records()...)
				tb.Start(0)
				tb.WaitIdle()
				require.NoError(t, tb.Stop())
				require.ElementsMatch(t, want, values(tb.Outputs("output")), "backlog: the same releases, from the timestamps")
			})
		})
	}
}

// A follower record with no gap in the log between it and what its rule
// needs is processed as of no horizon, and is not released early.
func TestNoGapNoHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := &clickBook{clicks: map[string][]click{}}
		tt := chaintest.New(t, horizonStages(b, chain.GateKey), testDecoder,
			chain.WithIdleTimeout(200*time.Millisecond), chain.WithLateness(time.Minute))
		tt.Start(0)
		tt.Append(0,
			chaintest.Rec("u1", ev("install", 10), t0),
			chaintest.Rec("u1", ev("click", 9), t0.Add(100*time.Millisecond)),
			chaintest.Rec("u1", ev("click", 100), t0.Add(150*time.Millisecond)))
		tt.WaitIdle()
		idles := idleReleases(tt)
		require.NoError(t, tt.Stop())
		got := values(tt.Outputs("output"))
		require.Len(t, got, 1)
		// Released by the lateness rule (the click at 100 s), the late click
		// seen. The horizon is none, or the tail's once confirmed: past the
		// position the rule needed either way.
		require.Contains(t, []string{"install@0<-1 as of none", "install@0<-1 as of 3"}, got[0])
		require.Zero(t, idles, "not released by idleness")
	})
}

func values(ms []chain.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}

func idleReleases(tt *chaintest.Tester) int64 {
	var n int64
	for _, s := range tt.Stats() {
		for _, ss := range s.Stages {
			n += ss.IdleReleases
		}
	}
	return n
}

// storeHorizonStages is horizonStages with the clicks in the partition's
// state (so that a restore from the changelog brings them back): click
// writes c/<user>/<offset> = its event time; install reads the user's
// clicks below its Context.Horizon.
func storeHorizonStages(scope chain.GateScope) []chain.Stage {
	return []chain.Stage{
		{Name: "click", Filter: typeFilter("click"), Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			k := fmt.Sprintf("c/%s/%020d", e.Key, e.Offset)
			return pc.State().Set([]byte(k), strconv.AppendInt(nil, e.Time.Unix(), 10), time.Time{})
		})},
		{Name: "install", Filter: typeFilter("install"), Gate: scope, Processor: chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			prefix := "c/" + string(e.Key) + "/"
			var below []click
			var scanErr error
			err := pc.State().Scan([]byte(prefix), []byte(prefix[:len(prefix)-1]+"0"), func(k, v []byte) bool {
				off, err1 := strconv.ParseInt(strings.TrimPrefix(string(k), prefix), 10, 64)
				sec, err2 := strconv.ParseInt(string(v), 10, 64)
				if err1 != nil || err2 != nil {
					scanErr = fmt.Errorf("bad click entry %q=%q", k, v)
					return false
				}
				if off < pc.Horizon() {
					below = append(below, click{time.Unix(sec, 0), off})
				}
				return true
			})
			if err != nil || scanErr != nil {
				return chain.Fatal(fmt.Errorf("scan clicks: %w %w", err, scanErr))
			}
			h := "none"
			if pc.Horizon() != math.MaxInt64 {
				h = fmt.Sprint(pc.Horizon())
			}
			out := fmt.Appendf(nil, "install@%d<-%s as of %s", e.Offset, attribute(below, e.Time), h)
			// The attribution is state too: a checkpoint after an
			// install has a changelog record to append.
			if err := pc.State().Set(fmt.Appendf(nil, "i/%s/%020d", e.Key, e.Offset), out, time.Time{}); err != nil {
				return chain.Fatal(err)
			}
			pc.Emit(chain.Message{Key: e.Key, Value: out})
			return nil
		})},
	}
}

// createTimeTail is an input written by a producer whose clock lags the
// engine's (CreateTime): the first six records, then a pause the engine
// sees (its clock passes record 5's timestamp + the idle timeout), then
// three records whose timestamps are only 10 ms after record 5's. Live,
// the installs are released at the quiet tail after record 5, without the
// late clicks 6 and 7 (each the better attribution of one install); the
// log itself shows no gap there.
func createTimeTail(t0 time.Time, idle time.Duration) (first, late []chain.Record) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	first = []chain.Record{
		chaintest.Rec("u1", ev("click", 0), at(0)),       // 0
		chaintest.Rec("u1", ev("install", 10), at(0)),    // 1: waits for wm > 70 s
		chaintest.Rec("u2", ev("click", 11), at(0)),      // 2
		chaintest.Rec("u2", ev("install", 12), at(0)),    // 3: waits too
		chaintest.Rec("u1", ev("click", 5), at(0)),       // 4
		chaintest.Rec("u2", ev("click", 12), at(idle/2)), // 5: the live tail
	}
	late = []chain.Record{
		chaintest.Rec("u1", ev("click", 8), at(idle/2+10*time.Millisecond)),   // 6: better for install@1, no gap before it
		chaintest.Rec("u2", ev("click", 12), at(idle/2+10*time.Millisecond)),  // 7: better for install@3 (a tie, later offset)
		chaintest.Rec("u1", ev("click", 100), at(idle/2+10*time.Millisecond)), // 8: passes every lateness
	}
	return first, late
}

// onceEach returns the outputs once each (by their record), failing the
// test when two copies of one differ (a conflicting duplicate), and how
// many copies there were.
func onceEach(t *testing.T, outs []string) (distinct []string, copies int) {
	t.Helper()
	return distinctBy(t, outs, "<-"), len(outs)
}

// lastIdle decodes the idle releases of partition 0's last commit.
func lastIdle(t *testing.T, tt *chaintest.Tester) []commit.IdleRelease {
	t.Helper()
	cs := tt.Commits(0)
	require.NotEmpty(t, cs)
	st, ok := commit.DecodeState(cs[len(cs)-1].Metadata, cs[len(cs)-1].Offset, []string{"click", "install"})
	require.True(t, ok, "metadata %q", cs[len(cs)-1].Metadata)
	return st.Idle
}

// A CreateTime tail whose live idle release was decided by the engine's
// clock (the log shows no gap after record 5): the decision is committed
// before the released installs run, and after a crash — their outputs
// produced, their positions never committed — the restart (on the same
// instance, or restored from the changelog on another one) releases them
// at the same point and repeats their outputs byte for byte. The same log
// processed from offset 0 in a new group (no metadata) decides over the
// log and differs: what the recording cannot cover. At-least-once, both
// gate scopes.
func TestRecordedIdleReleaseSurvivesACrash(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		for _, how := range []string{"restart", "changelog"} {
			t.Run(string(scope)+"/"+how, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const idle = 200 * time.Millisecond
					first, late := createTimeTail(time.Now(), idle)
					opts := []chain.Option{chain.WithIdleTimeout(idle), chain.WithLateness(time.Minute),
						chain.WithCommitInterval(time.Hour)} // commits: the idle release's and the final one
					tt := chaintest.New(t, storeHorizonStages(scope), testDecoder, opts...)
					cl := tt.UseChangelog()
					tt.Start(0)
					tt.Append(0, first...)
					time.Sleep(time.Second)
					synctest.Wait()
					require.ElementsMatch(t, createTimeWant, values(tt.Outputs("output")), "live: released at the quiet tail")
					rs := lastIdle(t, tt)
					require.Len(t, rs, 1, "the commit before the release carries it")
					require.Equal(t, int64(5), rs[0].After)
					require.Equal(t, "install", rs[0].Stage)
					require.Equal(t, int64(6), rs[0].LeaderNext)

					// The crash: the installs' outputs are out; nothing
					// after the idle release's commit is persisted (the
					// final checkpoint's changelog append fails) or
					// committed.
					cl.FailAppends(1)
					require.ErrorIs(t, tt.Stop(), chain.ErrFinalCommit)
					tt.Append(0, late...)
					if how == "changelog" {
						tt.StartOn("b", 0) // another instance: the state from the changelog
					} else {
						tt.Start(0)
					}
					tt.WaitIdle()
					r := restoreOf(t, tt)
					require.NoError(t, tt.Stop())
					if how == "changelog" {
						require.Positive(t, r.Records, "b's state came from the changelog")
					} else {
						require.Equal(t, "local state matches the committed checkpoint", r.Reason)
					}
					got, copies := onceEach(t, values(tt.Outputs("output")))
					require.Equal(t, 4, copies, "the installs ran again after the crash")
					require.ElementsMatch(t, createTimeWant, got, "the replay applies the recorded release")

					// A new group from offset 0 has no metadata: the log
					// shows no gap after record 5, so it is not released
					// there.
					tb := chaintest.New(t, storeHorizonStages(scope), testDecoder, opts...)
					tb.UseChangelog()
					tb.Append(0, tt.Log(0).Records()...)
					tb.Start(0)
					tb.WaitIdle()
					require.NoError(t, tb.Stop())
					backfill := values(tb.Outputs("output"))
					require.Len(t, backfill, 2)
					require.NotContains(t, backfill, createTimeWant[0], "a backfill in a new group decides over the log")
					require.NotContains(t, backfill, createTimeWant[1])
				})
			})
		}
	}
}

// Exactly-once: the decision is taken at once (the transaction that
// carries the released installs' outputs carries it); the cycle's commit
// fails, the partition rewinds — with the late records in the log by then
// — and the rewound cycle releases at the same point.
func TestRecordedIdleReleaseExactlyOnce(t *testing.T) {
	for _, scope := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		t.Run(string(scope), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const idle = 200 * time.Millisecond
				first, late := createTimeTail(time.Now(), idle)
				tt := chaintest.New(t, storeHorizonStages(scope), testDecoder, chain.WithIdleTimeout(idle),
					chain.WithLateness(time.Minute), chain.WithCommitInterval(5*time.Second))
				x := tt.UseTransactions()
				tt.UseChangelog()
				x.FailCommits(1)
				tt.Start(0)
				tt.Append(0, first...)
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, createTimeWant, pendingValues(x), "released at the quiet tail, in the open transaction")
				tt.Append(0, late...)
				time.Sleep(10 * time.Second) // the failing cycle, its rewind, the next cycle
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				commits, aborts := x.Counts()
				require.Positive(t, aborts, "the first cycle aborted")
				require.Positive(t, commits)
				got, copies := onceEach(t, values(tt.Outputs("output")))
				require.Equal(t, 2, copies, "read_committed sees each output once")
				require.ElementsMatch(t, createTimeWant, got, "the rewound cycle applies the decision")
			})
		})
	}
}

func pendingValues(x *chaintest.Transactor) []string {
	var out []string
	for _, m := range x.Pending() {
		if m.Topic == "output" {
			out = append(out, string(m.Value))
		}
	}
	return out
}

// The compatibility mode for binaries before dfl4 writes no dfl4: the
// tail is released at once, unrecorded, and no commit carries it.
func TestWithoutRecordedIdleReleasesWritesNoDfl4(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 200 * time.Millisecond
		first, late := createTimeTail(time.Now(), idle)
		tt := chaintest.New(t, storeHorizonStages(chain.GatePartition), testDecoder, chain.WithIdleTimeout(idle),
			chain.WithLateness(time.Minute), chain.WithCommitInterval(100*time.Millisecond), chain.WithoutRecordedIdleReleases())
		tt.UseChangelog()
		tt.Start(0)
		tt.Append(0, first...)
		time.Sleep(time.Second)
		synctest.Wait()
		require.ElementsMatch(t, createTimeWant, values(tt.Outputs("output")))
		tt.Append(0, late...)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.NotEmpty(t, tt.Commits(0))
		for _, c := range tt.Commits(0) {
			require.False(t, strings.HasPrefix(c.Metadata, "dfl4:"), "%q", c.Metadata)
		}
	})
}

// createTimeWant is what the live run gives: both installs as of the
// position past the tail they were released at.
var createTimeWant = []string{"install@1<-4 as of 6", "install@3<-5 as of 6"}

// TestHorizonOfARestartedFollowerWaitsForTheNextRecord: a restart resumes
// the click stage ahead of the install stage, its state holding the clicks
// it processed before. The fetcher's first batch ends at the install, so
// whether the log shows the click stage idle after it (the next record's
// timestamp) is not known yet when the install stage reads it, and the
// gate passes at once (the leader's restored position is far ahead). The
// install must wait for the next record: processed with no horizon, it
// would see the click past the gap that its leader wrote in the earlier
// run, and a replay (which knows the gap) would attribute it differently.
//
// When the log holds nothing after the install, the tail decision (the
// leader idle after it) gives the same horizon.
func TestHorizonOfARestartedFollowerWaitsForTheNextRecord(t *testing.T) {
	for _, tc := range []struct {
		scope chain.GateScope
		more  bool
	}{{chain.GatePartition, true}, {chain.GateKey, true}, {chain.GatePartition, false}, {chain.GateKey, false}} {
		name := string(tc.scope)
		if !tc.more {
			name += "/the log ends at the install"
		}
		scope := tc.scope
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				at := func(d time.Duration) time.Time { return t0.Add(d) }
				b := &clickBook{clicks: map[string][]click{}}
				tt := chaintest.New(t, horizonStages(b, scope), testDecoder,
					chain.WithIdleTimeout(200*time.Millisecond), chain.WithLateness(time.Minute))
				tt.Append(0,
					chaintest.Rec("u1", ev("click", 0), at(0)),              // 0
					chaintest.Rec("u1", ev("install", 10), at(time.Second))) // 1: the log shows a gap after it
				rest := []chain.Record{
					chaintest.Rec("u1", ev("click", 10), at(2*time.Second)),  // 2: within the lateness, past the gap
					chaintest.Rec("u2", ev("click", 100), at(3*time.Second)), // 3
				}
				// The earlier run: the click stage completed 0..3 and its state
				// holds their clicks; the install stage stopped before 1.
				b.clicks["u1"] = []click{{testutil.Base, 0}, {testutil.Base.Add(10 * time.Second), 2}}
				b.clicks["u2"] = []click{{testutil.Base.Add(100 * time.Second), 3}}
				md, err := commit.EncodeState(1, commit.State{Changelog: commit.NoChangelog, Stages: []commit.Checkpoint{
					{Stage: "click", Next: 4, Watermark: testutil.Base.Add(100 * time.Second).UnixNano()},
					{Stage: "install", Next: 1, Watermark: testutil.Base.UnixNano()},
				}})
				require.NoError(t, err)
				tt.SetCommit(0, chaintest.Commit{Offset: 1, Metadata: md})

				tt.Start(0)
				synctest.Wait()
				require.Empty(t, values(tt.Outputs("output")), "the install waits for the record after it")
				if tc.more {
					tt.Append(0, rest...)
				} else {
					time.Sleep(time.Second) // past the idle timeout: the tail decision
				}
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				require.Equal(t, []string{"install@1<-0 as of 2"}, values(tt.Outputs("output")))
			})
		})
	}
}
