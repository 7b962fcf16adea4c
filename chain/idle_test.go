package chain_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
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
