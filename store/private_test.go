package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// A write under a stage's Private prefix that expires by that stage's own
// watermark is not persisted, though the slowest stage is behind it; a
// shared key of the same expiry is, and reads the same as before the
// checkpoint until the slowest stage passes it.
func TestPrivateEntriesEvictAtTheirStageWatermark(t *testing.T) {
	at := func(hh int) time.Time { return time.Date(2026, 12, 8, hh, 0, 0, 0, time.UTC) }
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"lead", "follow"}
		ps := h.open(t, 0, st)
		ps.(chain.PrivateEvicter).EvictPrivate([][]string{{"own/"}, {"mine/"}})
		lead, follow := ps.Stage(0), ps.Stage(1)

		setExp(t, lead, 0, "own/a", "v", at(2))    // the leader's own, expired by its watermark
		setExp(t, lead, 1, "own/b", "v", at(5))    // its own, alive at its watermark
		setExp(t, lead, 2, "shared", "v", at(2))   // read by the follower: kept
		setExp(t, follow, 0, "mine/a", "v", at(2)) // the follower's own: its watermark is 1:00
		leadWM, followWM := at(3).UnixNano(), at(1).UnixNano()
		cp := []commit.Checkpoint{
			{Stage: "lead", Next: 3, Watermark: leadWM},
			{Stage: "follow", Next: 1, Watermark: followWM},
		}
		require.NoError(t, ps.Checkpoint(cp, chain.EvictBefore(time.Unix(0, followWM))))
		require.Equal(t, map[string]string{"own/b": "v", "shared": "v", "mine/a": "v"}, h.persisted(t, 0))
		requireGet(t, lead, "own/a", "", false)
		requireGet(t, follow, "shared", "v", true)

		// Once the follower passes them the others go as before.
		cp[1].Watermark = at(6).UnixNano()
		require.NoError(t, ps.Checkpoint(cp, chain.EvictBefore(at(6))))
		require.Empty(t, h.persisted(t, 0))
	})
}

// Without EvictPrivate every key waits for the slowest stage.
func TestWithoutPrivatePrefixesTheSlowestStageDecides(t *testing.T) {
	at := func(hh int) time.Time { return time.Date(2026, 12, 8, hh, 0, 0, 0, time.UTC) }
	forEachBackend(t, func(t *testing.T, h *harness) {
		st := []string{"lead", "follow"}
		ps := h.open(t, 0, st)
		setExp(t, ps.Stage(0), 0, "own/a", "v", at(2))
		cp := []commit.Checkpoint{
			{Stage: "lead", Next: 1, Watermark: at(3).UnixNano()},
			{Stage: "follow", Next: 0, Watermark: at(1).UnixNano()},
		}
		require.NoError(t, ps.Checkpoint(cp, chain.EvictBefore(at(1))))
		require.Equal(t, map[string]string{"own/a": "v"}, h.persisted(t, 0))
	})
}
