package attribution_test

import (
	"context"
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

// TestChainMatchesReferenceModel runs the attribution chain through the real
// engine (chaintest: in-memory partitions, the in-memory store) on generated
// workloads and checks the outputs equal the reference model's record for
// record, each stage's outputs in the offset order of its inputs (of each
// key's inputs under key-parallel processing), and the dead letters are
// exactly the invalid records. The velocity cases run click → velocity →
// install → purchase and check the alerts too; the restart cases stop the
// chain cleanly after a third of the input and abandon it (outputs never
// acknowledged: nothing of it committed, its pending state dropped) during
// the second third, then run it to the end. The as-of cases turn on the
// followers' reads as of their horizons (chain.WithAsOfReads), which the
// attribution chain leaves off because its rules compare offsets and times
// themselves: the outputs must be the model's either way.
func TestChainMatchesReferenceModel(t *testing.T) {
	cases := []struct {
		name     string
		lateness time.Duration
		distance int64
		buffer   int
		// slowLeaders: see the function.
		slowLeaders bool
		velocity    bool
		keyParallel int
		restarts    bool
		// gate: "" is the attribution chain's default, the key scope.
		gate chain.GateScope
		asOf bool
	}{
		{name: "defaults", buffer: 8192},
		{name: "lateness-10m-distance-5", lateness: 10 * time.Minute, distance: 5, buffer: 8192},
		{name: "tiny-buffer-polling", buffer: 32},
		{name: "partition-gate", buffer: 8192, gate: chain.GatePartition},
		{name: "partition-gate-tight", lateness: 3 * time.Hour, buffer: 8192, slowLeaders: true, gate: chain.GatePartition},
		{name: "lateness-3h", lateness: 3 * time.Hour, buffer: 256},
		{name: "lateness-3h-tight-gate", lateness: 3 * time.Hour, buffer: 8192, slowLeaders: true},
		{name: "lateness-0-tight-gate", buffer: 8192, slowLeaders: true},
		{name: "velocity", buffer: 8192, velocity: true},
		{name: "velocity-key-parallel-restarts", lateness: 10 * time.Minute, buffer: 256, velocity: true, keyParallel: 8, restarts: true},
		{name: "velocity-tight-gate", buffer: 8192, slowLeaders: true, velocity: true},
		{name: "velocity-restarts", lateness: 3 * time.Hour, buffer: 8192, velocity: true, restarts: true},
		{name: "as-of-reads", buffer: 8192, asOf: true},
		{name: "as-of-reads-partition-gate-tight", lateness: 3 * time.Hour, buffer: 8192, slowLeaders: true, gate: chain.GatePartition, asOf: true},
		{name: "as-of-reads-polling-restarts", lateness: 10 * time.Minute, buffer: 32, keyParallel: 8, restarts: true, asOf: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := attribution.DefaultConfig()
				cfg.Lateness = tc.lateness
				if tc.velocity {
					cfg.Velocity = attribution.DefaultVelocity(time.Hour)
					cfg.Velocity.Threshold = 2
				}
				w := attribution.Wiring{KeyConcurrency: tc.keyParallel, AlertsTopic: "alerts", Gate: tc.gate}
				if tc.slowLeaders {
					w.Stages = slowLeaders
				}
				r := runAgainstModelWith(t, cfg, w, tc.restarts, chain.WithOffsetDistance(tc.distance),
					chain.WithBufferSize(tc.buffer), chain.WithBatchSize(min(tc.buffer, 64)), chain.WithAsOfReads(tc.asOf))
				require.True(t, r.OK(), r.Summary())
				if tc.velocity {
					require.Greater(t, r.Alerts.Matched, 20, "the workload must raise alerts")
				}
			})
		})
	}
}

// runAgainstModel runs attribution.NewChainWith(cfg, w, opts...) through
// the real engine (chaintest, the in-memory store) on a generated workload
// (6,000 records, 3 partitions, cfg.MaxRecordBytes set to its limit) and
// checks what it wrote against the reference model: every output, alert
// (w.AlertsTopic, when it is not the output topic) and dead letter once,
// each stage's in input offset order (one stage at a time per partition;
// one key's under w.KeyConcurrency > 1). It must run inside a synctest
// bubble.
func runAgainstModel(t *testing.T, cfg attribution.Config, w attribution.Wiring, opts ...chain.Option) *reference.Report {
	t.Helper()
	return runAgainstModelWith(t, cfg, w, false, opts...)
}

// runAgainstModelWith is runAgainstModel, with restarts: the chain stops
// cleanly after a third of the input, and is abandoned during the second
// third (its outputs never acknowledged: nothing of it is committed and its
// pending state is dropped, as after a crash) before it runs to the end.
func runAgainstModelWith(t *testing.T, cfg attribution.Config, w attribution.Wiring, restarts bool, opts ...chain.Option) *reference.Report {
	t.Helper()
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, 3, 300, 11
	wc.Span = 4 * 24 * time.Hour
	wc.MaxRecordBytes = 4096
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	// The engine's idle timeout (the default, unless opts set one: then
	// the caller sets cfg.IdleTimeout too), for the model's horizons: the
	// workload's timestamps are minutes apart, so most records have a gap
	// after them.
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = chain.DefaultIdleTimeout
	}
	recs := workload.Generate(wc)
	tt := chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChainWith(cfg, w, o...) },
		append([]chain.Option{chain.WithStore(store.NewMemory()), chain.WithIdleTimeout(cfg.IdleTimeout)}, opts...)...)
	parts := workload.Split(recs, wc.Partitions)
	all := []int32{0, 1, 2}
	if restarts {
		feedThird := func(k int) {
			for p, recs := range parts {
				n := len(recs)
				tt.Append(int32(p), recs[k*n/3:(k+1)*n/3]...)
			}
		}
		feedThird(0)
		tt.Start(all...)
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(all...)
		feedThird(1)
		synctest.Wait() // every stage waits for acknowledgements
		require.ErrorIs(t, tt.Stop(), chain.ErrShutdownTimeout)
		tt.SetAckMode(chaintest.AckImmediately)
		feedThird(2)
	} else {
		for p := range parts {
			tt.Append(int32(p), parts[p]...)
		}
	}
	tt.Start(all...)
	tt.WaitIdle()
	require.NoError(t, tt.Stop())

	// The tester's logs assign offsets 0..n-1, as the split records had
	// for their partitions.
	inputs := make([][]chain.Record, len(parts))
	for p := range parts {
		inputs[p] = tt.Log(int32(p)).Records()
	}
	outputs := reference.FromMessages(tt.Outputs("output"))
	if w.AlertsTopic != "" && w.AlertsTopic != "output" {
		alerts := tt.Outputs(w.AlertsTopic)
		outputs = append(outputs, reference.FromMessages(alerts)...)
		if !cfg.Velocity.Enabled() {
			require.Empty(t, alerts)
		}
	}
	r := reference.Check(inputs, cfg, outputs, reference.FromMessages(tt.Outputs("dlq")),
		reference.Options{Duplicates: reference.NoDuplicates, Order: orderOf(w)})
	require.Greater(t, r.Outputs().Want, 1000, "the workload must produce outputs")
	require.Positive(t, r.DeadLetters.Want)
	if cfg.Velocity.Enabled() && w.AlertsTopic != "" {
		require.Len(t, tt.Outputs(w.AlertsTopic), r.Alerts.Distinct(), "the alerts, and only they, go to their topic")
	}
	return r
}

// orderOf is the output order a chain wired by w keeps: each stage's
// outputs in input offset order in strict partition order (the partition
// gate, no key-parallelism); one key's in order otherwise.
func orderOf(w attribution.Wiring) reference.Order {
	if w.Gate == chain.GatePartition && w.KeyConcurrency <= 1 {
		return reference.StageOrder
	}
	return reference.KeyOrder
}

// slowLeaders makes every stage but the last (click and install, and
// velocity when it runs) take 1ms (fake time) per record, so their
// followers run right behind the gate.
func slowLeaders(stages []chain.Stage) []chain.Stage {
	for i := range len(stages) - 1 {
		stages[i].Processor = slow{stages[i].Processor}
	}
	return stages
}

// slow delays Process by 1ms of (fake) time; Sequence passes through.
type slow struct{ chain.Processor }

func (s slow) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	time.Sleep(time.Millisecond)
	return s.Processor.Process(ctx, pc, ev)
}

func (s slow) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return s.Processor.(chain.Sequencer).Sequence(pc, ev)
}
