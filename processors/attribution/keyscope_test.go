package attribution_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

// scopeRun is one run of the attribution chain through the real engine
// (chaintest, the in-memory store) for the scope tests.
type scopeRun struct {
	outputs, dead []chain.Message
	inputs        [][]chain.Record
	idles, polls  int64
	stops         int
	elapsed       time.Duration // fake time from the start to the last record complete
}

// scopeMaxRecordBytes is the record size limit of the scope tests' rules
// and workload (its oversized records exceed it by one byte).
const scopeMaxRecordBytes = 4096

// scopePlan says how the input is fed and the chain stopped.
type scopePlan struct {
	// bursts > 0 feeds the input in that many bursts and waits until the
	// chain is idle after each: the gate's idle release runs at every
	// burst's end (the outputs then differ from the model's, which sees the
	// whole log, but not between the scopes).
	bursts int
	// restarts > 0 stops the chain cleanly that many times mid-run (at
	// random instants of fake time) and starts it again; outputs are then
	// acknowledged in any order (chaintest.AckAsync), so their order is not
	// checked.
	restarts int
}

// runScope runs attribution.NewChainWith(cfg, w, opts...) over a generated
// workload with one hot user (4,000 records, 2 partitions) fed as plan says.
// Under synctest.
func runScope(t *testing.T, cfg attribution.Config, w attribution.Wiring, plan scopePlan, seed uint64, opts ...chain.Option) *scopeRun {
	t.Helper()
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 4000, 2, 200, seed
	wc.Span = 2 * 24 * time.Hour
	wc.MaxRecordBytes = scopeMaxRecordBytes
	parts := workload.Split(workload.Generate(wc), wc.Partitions)
	tt := chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChainWith(cfg, w, o...) },
		append([]chain.Option{chain.WithStore(store.NewMemory()), chain.WithShutdownTimeout(time.Minute)}, opts...)...)
	if plan.restarts > 0 {
		tt.SetAckMode(chaintest.AckAsync)
	}
	run := &scopeRun{}
	stats := func() {
		for _, p := range tt.Stats() {
			for _, s := range p.Stages {
				run.idles += s.IdleReleases
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	bursts := max(plan.bursts, 1)
	start := time.Now()
	tt.Start(0, 1)
	for b := range bursts {
		for p := range parts {
			n := len(parts[p])
			tt.Append(int32(p), parts[p][b*n/bursts:(b+1)*n/bursts]...)
		}
		if plan.bursts > 0 {
			tt.WaitIdle()
		}
	}
	for range plan.restarts {
		time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond) // fake time: stop mid-run
		stats()
		require.NoError(t, tt.Stop())
		run.stops++
		tt.Start(0, 1)
	}
	tt.WaitIdle()
	run.elapsed = time.Since(start)
	stats()
	require.NoError(t, tt.Stop())
	for p := range parts {
		run.inputs = append(run.inputs, tt.Log(int32(p)).Records())
		run.polls += int64(tt.Log(int32(p)).Polls())
	}
	run.outputs, run.dead = tt.Outputs("output"), tt.Outputs("dlq")
	return run
}

// bySource maps each message to its input's source header; a repeated
// source fails the test (no duplicates in these runs).
func bySource(t *testing.T, msgs []chain.Message) map[string]string {
	t.Helper()
	out := make(map[string]string, len(msgs))
	for _, m := range msgs {
		src := ""
		for _, h := range m.Headers {
			if k := string(h.Key); k == attribution.SourceHeader || k == chain.HeaderDLQPartition || k == chain.HeaderDLQOffset {
				src += string(h.Value) + ";"
			}
		}
		require.NotEmpty(t, src, "message without source: %s", m.Value)
		_, dup := out[src]
		require.False(t, dup, "two messages for %s", src)
		out[src] = string(m.Key) + "=" + string(m.Value)
	}
	return out
}

// hotUserSlow makes every stage but the last take 3ms (fake time) for the
// records of the workload's most frequent user and 100µs for the others:
// the hot user paces every other user under the partition gate.
func hotUserSlow(hot string) func([]chain.Stage) []chain.Stage {
	return func(stages []chain.Stage) []chain.Stage {
		for i := range len(stages) - 1 {
			stages[i].Processor = hotSlow{stages[i].Processor, hot}
		}
		return stages
	}
}

type hotSlow struct {
	chain.Processor
	hot string
}

func (s hotSlow) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	d := 100 * time.Microsecond
	if string(ev.Key) == s.hot {
		d = 3 * time.Millisecond
	}
	time.Sleep(d)
	return s.Processor.Process(ctx, pc, ev)
}

func (s hotSlow) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return s.Processor.(chain.Sequencer).Sequence(pc, ev)
}

// hottest returns the most frequent key of the workload runScope generates.
func hottest(seed uint64) string {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 4000, 2, 200, seed
	wc.Span = 2 * 24 * time.Hour
	wc.MaxRecordBytes = scopeMaxRecordBytes
	n := map[string]int{}
	best := ""
	for _, r := range workload.Generate(wc) {
		k := string(r.Key)
		if n[k]++; n[k] > n[best] {
			best = k
		}
	}
	return best
}

// TestKeyScopeEqualsPartitionScopeAndModel runs the attribution chain
// under the key-scoped gate (its default) and under the partition gate on
// the same input, through the real engine, and checks the outputs and dead
// letters are equal record for record — and equal the reference model's
// when the input is consumed as a whole (the model sees the whole log) —
// over lateness and offset distances, a hot user whose records are slow,
// key-parallel stages, a tiny buffer (followers poll), clean restarts
// mid-run, and bursts separated by idle releases.
func TestKeyScopeEqualsPartitionScopeAndModel(t *testing.T) {
	cases := []struct {
		name     string
		lateness time.Duration
		distance int64
		buffer   int
		keyConc  int
		plan     scopePlan
		velocity bool // click → velocity → install → purchase
	}{
		{"defaults", 0, 0, 8192, 0, scopePlan{}, false},
		{"lateness-10m-distance-5", 10 * time.Minute, 5, 8192, 0, scopePlan{}, false},
		{"lateness-3h-key-parallel", 3 * time.Hour, 0, 8192, 8, scopePlan{}, false},
		{"key-parallel-tiny-buffer-polling", 0, 2, 16, 8, scopePlan{}, false},
		{"restarts", 10 * time.Minute, 3, 256, 4, scopePlan{restarts: 6}, false},
		{"restarts-polling", 0, 0, 16, 8, scopePlan{restarts: 4}, false},
		{"bursts-idle-release", 0, 0, 8192, 4, scopePlan{bursts: 6}, false},
		{"bursts-idle-release-lateness-1h", time.Hour, 4, 64, 0, scopePlan{bursts: 5}, false},
		{"velocity-key-parallel", 10 * time.Minute, 2, 8192, 8, scopePlan{}, true},
		{"velocity-restarts-polling", 0, 0, 16, 4, scopePlan{restarts: 4}, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(20 + i)
			hot := hottest(seed)
			cfg := attribution.DefaultConfig()
			cfg.Lateness = tc.lateness
			cfg.MaxRecordBytes = scopeMaxRecordBytes
			cfg.IdleTimeout = chain.DefaultIdleTimeout // the engine's, for the model's horizons
			if tc.velocity {
				cfg.Velocity = attribution.DefaultVelocity(time.Hour)
				cfg.Velocity.Threshold = 2
			}
			opts := []chain.Option{chain.WithOffsetDistance(tc.distance), chain.WithBufferSize(tc.buffer),
				chain.WithBatchSize(min(tc.buffer, 64)), chain.WithInFlight(128)}
			runs := map[chain.GateScope]*scopeRun{}
			for _, gate := range []chain.GateScope{chain.GateKey, chain.GatePartition} {
				synctest.Test(t, func(t *testing.T) {
					w := attribution.Wiring{Gate: gate, KeyConcurrency: tc.keyConc, Stages: hotUserSlow(hot)}
					runs[gate] = runScope(t, cfg, w, tc.plan, seed, opts...)
					if tc.plan.bursts == 0 {
						order := orderOf(w)
						if tc.plan.restarts > 0 {
							order = reference.AnyOrder
						}
						r := reference.Check(runs[gate].inputs, cfg, reference.FromMessages(runs[gate].outputs),
							reference.FromMessages(runs[gate].dead), reference.Options{Order: order})
						require.True(t, r.OK(), "%s gate: %s\n%v", gate, r.Summary(), r.Problems)
						require.Greater(t, r.Outputs().Want, 500)
						if tc.velocity {
							require.Greater(t, r.Alerts.Matched, 10, "the workload must raise alerts")
						}
					}
				})
			}
			k, p := runs[chain.GateKey], runs[chain.GatePartition]
			require.Equal(t, bySource(t, p.outputs), bySource(t, k.outputs), "outputs under key and partition scope")
			require.Equal(t, bySource(t, p.dead), bySource(t, k.dead), "dead letters under key and partition scope")
			require.Greater(t, len(k.outputs), 500)
			if tc.plan.bursts > 0 {
				require.Positive(t, k.idles, "the bursts must end in idle releases")
			}
			if tc.buffer <= 16 {
				require.Positive(t, k.polls, "followers must poll")
			}
			t.Logf("%s: %d outputs, %d dead letters; key scope: %v, %d idle releases, %d polls; partition scope: %v, %d idle releases, %d polls",
				tc.name, len(k.outputs), len(k.dead), k.elapsed, k.idles, k.polls, p.elapsed, p.idles, p.polls)
		})
	}
}
