package window

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/store"
)

// testDecoder reads "<key>|<RFC 3339 time>"; anything else is invalid.
var testDecoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	key, ts, ok := strings.Cut(string(r.Value), "|")
	if !ok {
		return chain.Decoded{}, errors.New("want key|time")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return chain.Decoded{}, err
	}
	return chain.Decoded{Type: "event", Time: t, Payload: key}, nil
})

func recordsOfLog(log []mrec) []chain.Record {
	recs := make([]chain.Record, len(log))
	for i, r := range log {
		v := "garbage"
		if r.valid {
			v = r.key + "|" + r.t.Format(time.RFC3339Nano)
		}
		recs[i] = chaintest.Rec(r.key, v, r.t)
	}
	return recs
}

// countingStages is a → count → z: the counter stage is a key-parallel
// follower whose output is "<offset> <count>" for every record it is
// given, and z trails it so that the eviction watermark trails the stream
// time.
func countingStages(c *Counter) []chain.Stage {
	noop := chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })
	count := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		n, err := c.Add(ctx, pc, ev.Payload.(string), ev.Time)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: ev.Key, Value: fmt.Appendf(nil, "%d %d", pc.Offset(), n)})
		return nil
	})
	return []chain.Stage{
		{Name: "a", Processor: noop},
		{Name: "count", Processor: count, KeyConcurrency: 4},
		{Name: "z", Processor: noop},
	}
}

// TestEngineMatchesModel runs a Counter in a real chain (chaintest, the
// in-memory store with its checkpoint eviction, key-parallel processing)
// over random logs in three parts: a clean restart after the first, an
// abandoned stop (outputs never acknowledged, so nothing of the second
// part is committed and its pending state is dropped) after the second,
// then everything again from the commits. Every valid record's count
// appears exactly once and equals the model's, and the persisted state
// still countable at the end is the model's.
func TestEngineMatchesModel(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 11))
				cfg := genConfig(rng)
				log := genLog(rng, cfg, 600, 10)
				want := modelCounts(log, cfg)
				c, err := New(cfg)
				require.NoError(t, err)
				st := store.NewMemory()
				tt := chaintest.New(t, countingStages(c), testDecoder, chain.WithStore(st),
					chain.WithCommitInterval(time.Millisecond), chain.WithBatchSize(16), chain.WithBufferSize(64))
				recs := recordsOfLog(log)
				cut1, cut2 := 200, 400

				tt.Start(0)
				tt.Feed(0, recs[:cut1]...)
				require.NoError(t, tt.Stop())

				tt.SetAckMode(chaintest.AckHold)
				tt.Start(0)
				tt.Append(0, recs[cut1:cut2]...)
				synctest.Wait()
				require.ErrorIs(t, tt.Stop(), chain.ErrShutdownTimeout)

				tt.SetAckMode(chaintest.AckImmediately)
				tt.Start(0)
				tt.Append(0, recs[cut2:]...)
				tt.WaitIdle()
				require.NoError(t, tt.Stop())

				got := map[int64]int64{}
				for _, m := range tt.Outputs("output") {
					f := strings.Fields(string(m.Value))
					o, _ := strconv.ParseInt(f[0], 10, 64)
					n, _ := strconv.ParseInt(f[1], 10, 64)
					_, dup := got[o]
					require.False(t, dup, "offset %d output twice", o)
					got[o] = n
				}
				for i, r := range log {
					if !r.valid {
						require.NotContains(t, got, int64(i))
						continue
					}
					require.Equal(t, want[i].count, got[int64(i)], "offset %d %+v", i, r)
				}

				entries, err := st.Entries(chaintest.Topic, 0)
				require.NoError(t, err)
				end := want[len(want)-1].s
				if last := log[len(log)-1]; last.valid && last.t.After(end) {
					end = last.t
				}
				state := map[string]map[int64]int64{}
				for k, v := range entries {
					user, ok := strings.CutPrefix(k, c.prefix)
					require.True(t, ok, k)
					var val value
					require.NoError(t, val.decode(v))
					for _, b := range val.bs {
						if b.idx*c.b+c.span > end.UnixNano() {
							if state[user] == nil {
								state[user] = map[int64]int64{}
							}
							state[user][b.idx*c.b] = b.n
						}
					}
				}
				require.Equal(t, modelBuckets(log, want, cfg, end), state, "persisted countable state")
			})
		})
	}
}

// TestMetricsFollowPartitions checks that a partition's keys are reported
// while it runs and dropped when it stops, and that after a restart the
// restored keys count once they are written again, never twice.
func TestMetricsFollowPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Name: "m", Window: time.Hour, Lateness: time.Hour}
		c, err := New(cfg)
		require.NoError(t, err)
		tt := chaintest.New(t, countingStages(c), testDecoder, chain.WithStore(store.NewMemory()))
		at := func(key string, d time.Duration) chain.Record {
			return chaintest.Rec(key, key+"|"+base.Add(d).Format(time.RFC3339Nano), base.Add(d))
		}
		tt.Start(0, 1)
		tt.Feed(0, at("a", 0), at("b", time.Minute), at("a", 2*time.Minute))
		tt.Feed(1, at("c", 0))
		s := c.Stats()
		require.Equal(t, int64(3), s.Keys, "a, b on partition 0; c on 1")
		require.Equal(t, int64(4), s.Counted)
		require.Positive(t, s.StateBytes)
		require.NoError(t, tt.Stop())
		synctest.Wait() // the trackers' AfterFuncs
		require.Zero(t, c.Stats().Keys, "stopped partitions report no keys")

		tt.Start(0)
		tt.Feed(0, at("a", 3*time.Minute), at("d", 3*time.Minute))
		s = c.Stats()
		require.Equal(t, int64(2), s.Keys, "a (restored, written again) and d; b is restored but not written since")
		tt.Feed(0, at("a", 4*time.Minute))
		require.Equal(t, int64(2), c.Stats().Keys, "a counted once")
		// Three hours later a and d have expired (W+L = 2h): the eviction
		// watermark passes them once the last stage has completed the
		// record at 3h, which the second Feed's record sees.
		tt.Feed(0, at("e", 3*time.Hour))
		tt.Feed(0, at("f", 3*time.Hour+time.Second))
		require.Equal(t, int64(2), c.Stats().Keys, "only e and f are live")
		require.NoError(t, tt.Stop())
	})
}
