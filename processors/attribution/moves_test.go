package attribution_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// TestStateFollowsMovesMatchesReferenceModel runs the attribution chain
// (with and without the velocity stage) while its partitions move between
// simulated instances (chaintest's UseChangelog): to instances with no
// local state, back to instances whose state is stale, and in place. Every
// clean move repeats nothing, so the outputs (and alerts) must equal the
// reference model's record for record, once each — which they cannot
// without the windows (clicks, installs, dedup ids, velocity counters)
// following the partitions. At the end, each partition's state rebuilt from
// the changelog alone equals the model's final state. The as-of case turns
// on the followers' reads as of their horizons (chain.WithAsOfReads), whose
// versions then move with the partitions through the changelog too.
func TestStateFollowsMovesMatchesReferenceModel(t *testing.T) {
	for _, c := range []struct{ velocity, asOf bool }{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("velocity=%v/as-of=%v", c.velocity, c.asOf), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { stateFollowsMoves(t, c.velocity, c.asOf) })
		})
	}
}

func stateFollowsMoves(t *testing.T, velocity, asOf bool) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, 3, 300, 17
	wc.Span = 4 * 24 * time.Hour
	wc.MaxRecordBytes = 4096
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	cfg.IdleTimeout = 100 * time.Millisecond // the engine's, below
	if velocity {
		cfg.Velocity = attribution.DefaultVelocity(time.Hour)
		cfg.Velocity.Threshold = 2
	}
	w := attribution.Wiring{AlertsTopic: "alerts"}
	tt := chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChainWith(cfg, w, o...) },
		chain.WithIdleTimeout(cfg.IdleTimeout), chain.WithAsOfReads(asOf))
	cl := tt.UseChangelog()
	parts := workload.Split(workload.Generate(wc), wc.Partitions)

	// Feed each partition in eight slices; between slices the partitions
	// move: a → b (empty), b → c (empty), c → a (stale), a → a (restart),
	// ...
	instances := []string{"a", "b", "c", "a", "a", "d", "b", "c"}
	const slices = 8
	for i := range slices {
		if i == 0 {
			tt.StartOn(instances[0], 0, 1, 2)
		} else {
			require.NoError(t, tt.Move(instances[i], 0, 1, 2))
		}
		for p := range parts {
			n := len(parts[p])
			tt.Append(int32(p), parts[p][i*n/slices:(i+1)*n/slices]...)
		}
		tt.WaitIdle()
	}
	require.NoError(t, tt.Stop())

	inputs := make([][]chain.Record, len(parts))
	for p := range parts {
		inputs[p] = tt.Log(int32(p)).Records()
	}
	model := reference.Expect(inputs, cfg)
	outputs := append(reference.FromMessages(tt.Outputs("output")), reference.FromMessages(tt.Outputs("alerts"))...)
	r := model.Check(outputs, reference.FromMessages(tt.Outputs("dlq")),
		reference.Options{Duplicates: reference.NoDuplicates, Order: orderOf(w)})
	require.True(t, r.OK(), r.Summary())
	require.Greater(t, r.Outputs().Matched, 1000, "the workload must produce outputs")
	if velocity {
		require.Greater(t, r.Alerts.Matched, 20, "the workload must raise alerts")
	}
	if velocity {
		return // the reference's final state (Usable) covers the attribution windows only
	}
	for p, want := range model.Results() {
		// The changelog alone holds the state.
		rebuilt := tt.Instance(fmt.Sprintf("rebuilt-%d", p))
		ps, err := rebuilt.OpenPartition(chaintest.Topic, int32(p), tt.Chain().StageNames())
		require.NoError(t, err)
		recs := cl.Records(int32(p))
		require.NoError(t, ps.(chain.ChangelogStore).Restore(recs, recs[len(recs)-1].Offset+1))
		require.NoError(t, ps.Close())
		entries, err := rebuilt.Entries(chaintest.Topic, int32(p))
		require.NoError(t, err)
		snap, err := attribution.SnapshotOf(entries)
		require.NoError(t, err)
		require.Equal(t, want.Final.String(), reference.Usable(snap, want.StreamTime, cfg).String(), "partition %d: state rebuilt from the changelog", p)
	}
}
