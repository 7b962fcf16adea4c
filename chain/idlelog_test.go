package chain_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

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
