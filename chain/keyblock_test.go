package chain_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// TestFullWindowOfGatedRecordsIsReleasedWhenTheLeaderGoesIdle: the
// follower's in-flight window fills with records that wait in the gate for
// a q(t+Lateness) its leader will never read; the leader completes
// everything and goes idle. The follower, blocked on its full window, must
// still see the idleness and release them (the earlier attempt deadlocked
// here: the window's wait watched only the stage's own progress).
func TestFullWindowOfGatedRecordsIsReleasedWhenTheLeaderGoesIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		stages := []chain.Stage{
			{Name: "click", Filter: typeFilter("click"), Processor: r.proc(false, nil)},
			{Name: "install", Filter: typeFilter("install"), Processor: r.proc(false, nil), Gate: chain.GateKey},
		}
		tt := chaintest.New(t, stages, testDecoder, chain.WithLateness(time.Hour),
			chain.WithIdleTimeout(100*time.Millisecond), chain.WithInFlight(4))
		tt.Start(0)
		for i := range 12 {
			tt.Append(0, chaintest.Rec(fmt.Sprintf("u%d", i), ev("install", i), base))
		}
		tt.WaitIdle()
		require.NoError(t, tt.Stop())
		require.Len(t, r.callsOf("install"), 12, "every install released by the leader's idleness")
	})
}
