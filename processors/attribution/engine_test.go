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
// record, each stage's outputs in the offset order of its inputs, and the
// dead letters are exactly the invalid records.
func TestChainMatchesReferenceModel(t *testing.T) {
	cases := []struct {
		name     string
		lateness time.Duration
		distance int64
		buffer   int
		// slowLeaders: see the function.
		slowLeaders bool
	}{
		{"defaults", 0, 0, 8192, false},
		{"lateness-10m-distance-5", 10 * time.Minute, 5, 8192, false},
		{"tiny-buffer-polling", 0, 0, 32, false},
		{"lateness-3h", 3 * time.Hour, 0, 256, false},
		{"lateness-3h-tight-gate", 3 * time.Hour, 0, 8192, true},
		{"lateness-0-tight-gate", 0, 0, 8192, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := attribution.DefaultConfig()
				cfg.Lateness = tc.lateness
				w := attribution.Wiring{Gate: chain.GatePartition}
				if tc.slowLeaders {
					w.Stages = slowLeaders
				}
				r := runAgainstModel(t, cfg, w, chain.WithOffsetDistance(tc.distance),
					chain.WithBufferSize(tc.buffer), chain.WithBatchSize(min(tc.buffer, 64)))
				require.True(t, r.OK(), r.Summary())
			})
		})
	}
}

// runAgainstModel runs attribution.NewChainWith(cfg, w, opts...) through
// the real engine (chaintest, the in-memory store) on a generated workload
// (6,000 records, 3 partitions, cfg.MaxRecordBytes set to its limit) and
// checks what it wrote against the reference model: every output and dead
// letter once, each stage's in input offset order (one stage at a time per
// partition). It must run inside a synctest bubble.
func runAgainstModel(t *testing.T, cfg attribution.Config, w attribution.Wiring, opts ...chain.Option) *reference.Report {
	t.Helper()
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, 3, 300, 11
	wc.Span = 4 * 24 * time.Hour
	wc.MaxRecordBytes = 4096
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	recs := workload.Generate(wc)
	tt := chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChainWith(cfg, w, o...) },
		append([]chain.Option{chain.WithStore(store.NewMemory())}, opts...)...)
	parts := workload.Split(recs, wc.Partitions)
	for p := range parts {
		tt.Append(int32(p), parts[p]...)
	}
	tt.Start(0, 1, 2)
	tt.WaitIdle()
	require.NoError(t, tt.Stop())

	// The tester's logs assign offsets 0..n-1, as the split records had
	// for their partitions.
	inputs := make([][]chain.Record, len(parts))
	for p := range parts {
		inputs[p] = tt.Log(int32(p)).Records()
	}
	r := reference.Check(inputs, cfg, reference.FromMessages(tt.Outputs("output")), reference.FromMessages(tt.Outputs("dlq")),
		reference.Options{Duplicates: reference.NoDuplicates, Order: orderOf(w)})
	require.Greater(t, r.Outputs().Want, 1000, "the workload must produce outputs")
	require.Positive(t, r.DeadLetters.Want)
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

// slowLeaders makes the click and install stages take 1ms (fake time) per
// record, so their followers run right behind the gate.
func slowLeaders(stages []chain.Stage) []chain.Stage {
	for i := range 2 {
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
