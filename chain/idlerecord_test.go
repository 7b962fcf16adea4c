package chain_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

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

// createTimeWant is what the live run gives: both installs as of the
// position past the tail they were released at.
var createTimeWant = []string{"install@1<-4 as of 6", "install@3<-5 as of 6"}

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
