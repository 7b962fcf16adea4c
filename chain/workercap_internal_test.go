package chain

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// TestWorkerCapEqualBacklogsInArrivalOrder: waiters whose keys have equal
// backlogs get the slot in the order they came, also after one of them
// gave up (a removal moves the last waiter into its place), and a larger
// backlog goes first.
func TestWorkerCapEqualBacklogsInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWorkerCap(1)
		var one, two atomic.Int32
		one.Store(1)
		two.Store(2)
		require.True(t, c.acquire(t.Context(), &one))

		var order []string
		wait := func(name string, backlog *atomic.Int32, ctx context.Context) {
			go func() {
				if c.acquire(ctx, backlog) {
					order = append(order, name)
					c.release()
				}
			}()
			synctest.Wait()
		}
		quit, cancel := context.WithCancel(t.Context())
		wait("a", &one, t.Context())
		wait("gone", &one, quit)
		wait("b", &one, t.Context())
		wait("c", &one, t.Context())
		wait("big", &two, t.Context())
		cancel()
		synctest.Wait()
		require.Equal(t, int32(4), c.nwait.Load())

		c.release()
		synctest.Wait()
		require.Equal(t, []string{"big", "a", "b", "c"}, order)
		require.Zero(t, c.nwait.Load())
	})
}
