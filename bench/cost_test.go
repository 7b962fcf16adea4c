package bench

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitCost: a cost's wait lasts what was asked (a simulated cost is
// never cheaper than its draw) and ends early only with its context.
func TestWaitCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		require.NoError(t, waitCost(context.Background(), 1300*time.Microsecond))
		require.Equal(t, 1300*time.Microsecond, time.Since(t0))

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- waitCost(ctx, time.Hour) }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, 1300*time.Microsecond, time.Since(t0))
	})
}

// TestLimiterOvershoot: the overshoot is the cost timers' waits ÷ the costs
// asked − 1, and zero before any cost.
func TestLimiterOvershoot(t *testing.T) {
	l := newLimiter(1)
	require.Zero(t, l.overshoot())
	l.waitedFor(time.Millisecond, 1100*time.Microsecond)
	l.waitedFor(time.Millisecond, 1300*time.Microsecond)
	require.InDelta(t, 0.2, l.overshoot(), 1e-9)
}
