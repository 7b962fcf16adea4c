package chain

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// backlogOf is a backlog of n records, counted in c's multi as its owner
// (the dispatcher) would have counted it.
func backlogOf(c *workerCap, n int) *backlog {
	b := new(backlog)
	b.start()
	for range n - 1 {
		c.grow(b)
	}
	return b
}

// TestWorkerCapEqualBacklogsInArrivalOrder: waiters whose keys have equal
// backlogs get the slot in the order they came, also after one of them
// gave up (it leaves the middle of the queue), and a larger backlog goes
// first.
func TestWorkerCapEqualBacklogsInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWorkerCap(1)
		one, two := backlogOf(c, 1), backlogOf(c, 2)
		require.True(t, c.acquire(t.Context(), one))

		var order []string
		wait := func(name string, b *backlog, ctx context.Context) {
			go func() {
				if c.acquire(ctx, b) {
					order = append(order, name)
					c.release()
				}
			}()
			synctest.Wait()
		}
		quit, cancel := context.WithCancel(t.Context())
		wait("a", one, t.Context())
		wait("gone", one, quit)
		wait("b", one, t.Context())
		wait("c", one, t.Context())
		wait("big", two, t.Context())
		cancel()
		synctest.Wait()
		require.Equal(t, int32(4), c.nwait.Load())

		c.release()
		synctest.Wait()
		require.Equal(t, []string{"big", "a", "b", "c"}, order)
		require.Zero(t, c.nwait.Load())
	})
}

// TestWorkerCapBacklogGrowsWhileWaiting: every backlog is one record when
// the waiters arrive, so the head of the queue is next; a waiter whose key
// then gets a second record (grow) goes first, and once it is back to one
// (shrink) arrival order rules again. The cap's count of keys with two
// records or more follows the backlogs, and forget retires a dropped queue
// whole.
func TestWorkerCapBacklogGrowsWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWorkerCap(1)
		held := backlogOf(c, 1)
		require.True(t, c.acquire(t.Context(), held))
		bs := map[string]*backlog{"a": backlogOf(c, 1), "b": backlogOf(c, 1), "c": backlogOf(c, 1)}
		require.Zero(t, c.nlong.Load())

		var order []string
		for _, name := range []string{"a", "b", "c"} {
			go func() {
				if c.acquire(t.Context(), bs[name]) {
					order = append(order, name)
					c.release()
				}
			}()
			synctest.Wait()
		}
		require.True(t, c.yield(t.Context(), held), "equal backlogs: the holder keeps its slot")
		c.grow(bs["c"])
		require.Equal(t, int32(1), c.nlong.Load())
		go func() {
			if c.yield(t.Context(), held) {
				order = append(order, "held")
				c.release()
			}
		}()
		synctest.Wait()
		require.Equal(t, []string{"c", "a", "b", "held"}, order, "c's key grew to two records while it waited")
		require.Zero(t, c.nwait.Load())

		c.shrink(bs["c"])
		require.Zero(t, c.nlong.Load())
		d := backlogOf(c, 3)
		require.Equal(t, int32(1), c.nlong.Load())
		c.forget(d)
		require.Zero(t, c.nlong.Load())
		require.Zero(t, d.n.Load())
	})
}
