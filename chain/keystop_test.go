package chain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// A stop (revoke, shutdown) while records wait in the key gates, with
// cycles pausing the stages all along: the final cycle commits what the
// drain completed, and the restart repeats nothing.
func TestExactlyOnceKeyGateCleanStopRepeatsNothing(t *testing.T) { testKeyGateCleanStop(t, true) }

// TestKeyGateCleanStopRepeatsNothing stops key-scoped chains mid-run (the
// SIGTERM path) with records waiting in the key gates, restarts them, and
// checks every record was processed exactly once per stage across both
// runs and the final commit covers exactly what completed: the drain runs
// the gated records to the end (DESIGN I6). In exactly-once mode
// (TestExactlyOnceKeyGateCleanStopRepeatsNothing) cycles run all along —
// each pausing the stages while records wait in the key gates — and the
// stop commits the final cycle: read_committed readers see every output
// exactly once.
func TestKeyGateCleanStopRepeatsNothing(t *testing.T) { testKeyGateCleanStop(t, false) }

func testKeyGateCleanStop(t *testing.T, exactlyOnce bool) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 3))
				recs := workload(rng, 2000, 9, 0)
				hot := string(recs[0].Key)
				cost := func(_ string, o int64) time.Duration {
					if string(recs[o].Key) == hot {
						return 2 * time.Millisecond
					}
					return time.Duration(o%7) * 100 * time.Microsecond
				}
				r := newRecorder()
				obs := newKeyInvariantObserver(t, 3, time.Second, []bool{false, true, true})
				obs.fed(recs...)
				gates := [3]chain.GateScope{"", chain.GateKey, chain.GateKey}
				tt := chaintest.New(t, keyedStages(r, true, 4+int(seed%2)*4, cost, gates), testDecoder,
					chain.WithOffsetDistance(3), chain.WithLateness(time.Second), chain.WithObserver(obs),
					chain.WithBufferSize(64), chain.WithBatchSize(16), chain.WithInFlight(64), chain.WithCommitInterval(2*time.Millisecond))
				var x *chaintest.Transactor
				if exactlyOnce {
					x = tt.UseTransactions()
				}
				if seed%4 >= 2 {
					tt.SetAckMode(chaintest.AckAsync)
				}
				tt.Start(0)
				tt.Append(0, recs...)
				// Stop at an instant when records wait in a key gate.
				gated := 0
				for i := 0; gated == 0 && i < 2000; i++ {
					time.Sleep(time.Duration(1+rng.IntN(3)) * 100 * time.Microsecond) // fake time
					for _, s := range tt.Stats()[0].Stages {
						gated += s.KeyGated
					}
				}
				require.Positive(t, gated, "records must be waiting in a key gate when the stop comes")
				require.NoError(t, tt.Stop())
				commits := tt.Commits(0)
				last := commits[len(commits)-1]
				require.Less(t, last.Offset, int64(len(recs)), "the stop should land mid-run")
				for _, st := range []string{"click", "install", "purchase"} {
					for o := range r.callsOf(st) {
						require.Less(t, o, int64(len(recs)))
					}
				}

				tt.Start(0)
				tt.WaitIdle()
				require.NoError(t, tt.Stop())
				obs.check()
				n := 0
				for _, st := range []string{"click", "install", "purchase"} {
					for o, c := range r.calls[st] {
						require.Equal(t, 1, c, "stage %s offset %d processed %d times across the restart", st, o, c)
					}
					n += len(r.calls[st])
				}
				require.Equal(t, len(recs), n, "nothing lost")
				commits = tt.Commits(0)
				require.Equal(t, int64(len(recs)), commits[len(commits)-1].Offset)
				if exactlyOnce {
					ncommits, aborts := x.Counts()
					require.Zero(t, aborts, "no cycle aborted")
					require.Greater(t, ncommits, 2, "cycles ran while records waited in the key gates")
					seen := map[string]int{}
					for _, m := range tt.Outputs("output") {
						seen[string(m.Value)]++
					}
					for v, c := range seen {
						require.Equal(t, 1, c, "output %s visible %d times", v, c)
					}
					require.Len(t, seen, len(recs), "every output visible")
				}
			})
		})
	}
}

// TestKeyGateFatalErrorDoesNotWaitForTheShutdownTimeout: a leader's fatal
// error leaves its follower's gated records without the completion they
// wait for; the partition still stops at once (they are dropped, not
// committed) instead of waiting out the shutdown timeout.
func TestKeyGateFatalErrorDoesNotWaitForTheShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lead := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			if e.Offset == 2 {
				time.Sleep(time.Millisecond)
				return chain.Fatal(fmt.Errorf("boom"))
			}
			return nil
		})
		stages := []chain.Stage{
			{Name: "lead", Processor: lead, KeyConcurrency: 4},
			{Name: "follow", Gate: chain.GateKey, Processor: chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithShutdownTimeout(time.Hour))
		tt.Start(0)
		for i := range 10 {
			tt.Append(0, chaintest.Rec([]string{"a", "b"}[i%2], ev("click", i), base))
		}
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		err := tt.Stop()
		require.ErrorContains(t, err, "boom")
		require.Less(t, time.Since(start), time.Second, "the stop must not wait for the shutdown timeout")
		commits := tt.Commits(0)
		require.Equal(t, int64(2), commits[len(commits)-1].Offset)
	})
}

// TestKeyGateStopWithLeaderWaitingForAWorker: a stop finds the leader (key-
// parallel, every worker busy) waiting to dispatch a record it has begun —
// and published as begun, so its key-scoped follower admitted records that
// wait for it. The leader must run that record in the drain (not drop it, as
// a stage with a partition-scoped follower may): else the follower's drain
// waits for it until the shutdown timeout and the stop is not clean.
func TestKeyGateStopWithLeaderWaitingForAWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})
		lead := chain.ProcessorFunc(func(ctx context.Context, _ *chain.Context, e *chain.Event) error {
			if k := string(e.Key); k == "a" || k == "b" {
				<-hold
			}
			return nil
		})
		var followed sync.Map
		stages := []chain.Stage{
			{Name: "lead", Processor: lead, KeyConcurrency: 2},
			{Name: "follow", Gate: chain.GateKey, Filter: typeFilter("install"), Processor: chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
				followed.Store(e.Offset, true)
				return nil
			})},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithShutdownTimeout(time.Hour))
		tt.Start(0)
		// The follower skips clicks: it admits each once the leader has
		// begun it, and the skip waits only for the leader's record of the
		// same key (a′).
		for i, k := range []string{"a", "b", "c", "c"} {
			tt.Append(0, chaintest.Rec(k, ev("click", i), base))
		}
		synctest.Wait() // a, b on the workers; c@2 begun, waiting for a worker
		stopped := make(chan error, 1)
		start := time.Now()
		go func() { stopped <- tt.Stop() }()
		synctest.Wait()
		close(hold)
		require.NoError(t, <-stopped)
		require.Less(t, time.Since(start), time.Minute, "a clean stop, not the shutdown timeout")
		commits := tt.Commits(0)
		require.Equal(t, int64(3), commits[len(commits)-1].Offset, "offsets 0..2 complete in both stages")
	})
}
