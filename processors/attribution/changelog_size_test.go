package attribution_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// changelogBytesAfterHistory builds a user with history clicks and history
// installs (inside the lookback and the retention), checkpoints them, then
// processes one more click, install and purchase of that user and returns
// the bytes (keys and values) of the changelog records of the checkpoint
// that persists those three records.
func changelogBytesAfterHistory(t *testing.T, history int) int {
	t.Helper()
	cfg := attribution.DefaultConfig()
	stages := attribution.Chain(cfg)
	names := []string{stages[0].Name, stages[1].Name, stages[2].Name}
	ps, err := store.NewMemory().OpenPartition("events", 0, names)
	require.NoError(t, err)
	defer ps.Close()
	cs, ok := ps.(chain.ChangelogStore)
	require.True(t, ok)

	t0 := time.Date(2026, 9, 20, 0, 0, 0, 0, time.UTC)
	var off int64
	run := func(k int, e *attribution.Event, stream time.Time) {
		ev := &chain.Event{Record: chain.Record{Topic: "events", Offset: off, Key: []byte(e.UserID)},
			Decoded: chain.Decoded{Type: e.Type, Time: e.Time, Payload: e}}
		pc := chain.NewContext(chain.ContextOptions{Topic: "events", Stage: names[k], Offset: off, StreamTime: stream,
			EvictionWatermark: t0.Add(-24 * time.Hour), State: ps.Stage(k)})
		skip, err := stages[k].Processor.(chain.Sequencer).Sequence(pc, ev)
		require.NoError(t, err)
		if !skip {
			require.NoError(t, stages[k].Processor.Process(context.Background(), pc, ev))
		}
		off++
	}
	// Event ids of one length whatever the history, so that only the
	// history can change the records' size.
	id := func(typ string, n int) string { return fmt.Sprintf("%s%08d", typ[:1], n) }
	checkpoint := func() []chain.ChangelogRecord {
		cps := make([]commit.Checkpoint, len(names))
		for i, n := range names {
			cps[i] = commit.Checkpoint{Stage: n, Next: off}
		}
		pc, err := cs.PrepareCheckpoint(cps, time.Time{})
		require.NoError(t, err)
		recs := pc.Records()
		require.NoError(t, pc.Commit(off))
		return recs
	}
	for i := range history {
		at := t0.Add(-6 * 24 * time.Hour).Add(time.Duration(i) * time.Minute)
		run(0, &attribution.Event{EventID: id("click", i), Type: attribution.TypeClick, UserID: "heavy", Time: at,
			CampaignID: "cmp-7", Channel: "search"}, at)
	}
	for i := range history {
		at := t0.Add(-20 * 24 * time.Hour).Add(time.Duration(i) * time.Minute)
		run(1, &attribution.Event{EventID: id("install", i), Type: attribution.TypeInstall, UserID: "heavy", Time: at}, t0)
	}
	checkpoint()

	run(0, &attribution.Event{EventID: id("click", history), Type: attribution.TypeClick, UserID: "heavy", Time: t0,
		CampaignID: "cmp-7", Channel: "search"}, t0)
	run(1, &attribution.Event{EventID: id("install", history), Type: attribution.TypeInstall, UserID: "heavy",
		Time: t0.Add(time.Minute)}, t0.Add(time.Minute))
	run(2, &attribution.Event{EventID: id("purchase", 0), Type: attribution.TypePurchase, UserID: "heavy",
		Time: t0.Add(2 * time.Minute), RevenueText: "4.99", Currency: "USD"}, t0.Add(2*time.Minute))
	n := 0
	for _, r := range checkpoint() {
		n += len(r.Key) + len(r.Value)
	}
	return n
}

// TestChangelogDoesNotGrowWithHistory: the changelog records a record adds
// do not depend on how many clicks and installs its user already
// has: one key per click and per install, so a click, an install
// and a purchase write the same keys, of the same size, after a history of
// 10 as after one of 2,000. With one list per user (layout 1) the install
// rewrote — and the changelog carried — the user's whole install list.
func TestChangelogDoesNotGrowWithHistory(t *testing.T) {
	small := changelogBytesAfterHistory(t, 10)
	large := changelogBytesAfterHistory(t, 2_000)
	t.Logf("changelog bytes of a click, an install and a purchase: %d after a history of 10, %d after 2,000", small, large)
	require.Positive(t, small)
	require.Equal(t, small, large, "changelog bytes of a click, an install and a purchase: history 10 vs 2,000")
}
