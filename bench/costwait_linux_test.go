package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeArm replaces k's timerfd with a record of its expiries, and its
// clock with now.
func fakeArm(k *kicker, now *int64) *[]int64 {
	var arms []int64
	k.arm = func(at int64) error { arms = append(arms, at); return nil }
	k.now = func() int64 { return *now }
	return &arms
}

func minPending(k *kicker) int64 {
	var m int64
	for _, e := range k.pending {
		if m == 0 || e.at < m {
			m = e.at
		}
	}
	return m
}

// TestKickerArmsEarliest: whatever the order deadlines come and go in, the
// one timerfd is armed to the earliest pending deadline rounded up to the
// grid (never earlier than a deadline it serves), is re-armed only when
// the earliest changes, and is disarmed when the last waiter leaves before
// its expiry.
func TestKickerArmsEarliest(t *testing.T) {
	k, err := newKicker()
	require.NoError(t, err)
	defer k.file.Close()
	now := int64(1) // every deadline is ahead
	arms := fakeArm(k, &now)
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(time.Hour)
	var entries []*kickEntry
	for i := range 500 {
		dl := base.Add(time.Duration(rng.IntN(20_000_000))) // 0–20ms, any order
		e := k.add(dl)
		require.GreaterOrEqual(t, e.at, k.mono(dl), "kick earlier than its deadline")
		require.Less(t, e.at-k.mono(dl), int64(kickGrid))
		require.Zero(t, e.at%int64(kickGrid))
		require.Equal(t, minPending(k), k.armed, "after add %d", i)
		entries = append(entries, e)
	}
	cells := map[int64]bool{}
	rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	for i, e := range entries {
		before := len(*arms)
		prev := k.armed
		k.remove(e)
		require.Equal(t, minPending(k), k.armed, "after remove %d", i)
		if k.armed == prev && len(k.pending) > 0 {
			require.Equal(t, before, len(*arms), "re-armed although the earliest did not change")
		}
	}
	require.Empty(t, k.pending)
	require.Zero(t, k.armed)
	require.Zero(t, (*arms)[len(*arms)-1], "not disarmed when the last waiter left early")
	// Earliest first: each cell is armed once, plus the final disarm.
	*arms = (*arms)[:0]
	var sorted []*kickEntry
	clear(cells)
	for i := range 300 {
		e := k.add(base.Add(time.Duration(i) * 10 * time.Microsecond))
		sorted = append(sorted, e)
		cells[e.at] = true
	}
	for _, e := range sorted {
		k.remove(e)
	}
	require.Len(t, *arms, len(cells)+1, "one arm per 50µs cell and a disarm")
}

// TestKickerPassedDeadlines: a next deadline that has passed is not armed
// (its timer is due; the runtime runs it); the last waiter after its
// expiry does not disarm.
func TestKickerPassedDeadlines(t *testing.T) {
	k, err := newKicker()
	require.NoError(t, err)
	defer k.file.Close()
	now := int64(0)
	arms := fakeArm(k, &now)
	base := time.Now()
	a := k.add(base)
	b := k.add(base.Add(time.Millisecond))
	require.Equal(t, []int64{a.at}, *arms)
	now = b.at + 1 // both passed
	k.remove(a)
	require.Equal(t, b.at, k.armed)
	require.Len(t, *arms, 1, "armed a deadline that has passed")
	k.remove(b)
	require.Zero(t, k.armed)
	require.Len(t, *arms, 1, "disarmed a timerfd that had fired")
}

// TestKickerTimerfd: the real timerfd follows the earliest pending
// deadline and is disarmed when no waiter is left.
func TestKickerTimerfd(t *testing.T) {
	k, err := newKicker()
	require.NoError(t, err)
	defer k.file.Close()
	now := time.Now()
	h2 := k.add(now.Add(2 * time.Hour))
	h1 := k.add(now.Add(time.Hour))
	m30 := k.add(now.Add(30 * time.Minute))
	inside := func(lo, hi time.Duration) {
		t.Helper()
		r, err := k.remaining()
		require.NoError(t, err)
		require.True(t, r > lo && r <= hi+kickGrid, "timerfd due in %v, want (%v, %v]", r, lo, hi)
	}
	inside(29*time.Minute, 30*time.Minute)
	k.remove(m30)
	inside(59*time.Minute, time.Hour)
	k.remove(h2)
	inside(59*time.Minute, time.Hour)
	k.remove(h1)
	r, err := k.remaining()
	require.NoError(t, err)
	require.Zero(t, r, "disarmed")
	require.Nil(t, k.armErr.Load())
}

// TestKickWaitConcurrent: many waiters on one kicker, deadlines arriving
// in any order, each wakes no earlier than its own deadline; a cancelled
// wait ends with its context; nothing is left pending or armed.
func TestKickWaitConcurrent(t *testing.T) {
	k, err := newKicker()
	require.NoError(t, err)
	defer k.file.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	var ds []time.Duration
	for range 200 {
		ds = append(ds, time.Duration(100+rng.IntN(5000))*time.Microsecond)
	}
	var wg sync.WaitGroup
	early := make(chan time.Duration, len(ds))
	for _, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := k.wait(context.Background(), d); err != nil {
				t.Error(err)
			}
			if time.Since(t0) < d {
				early <- d
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.wait(ctx, time.Hour) }()
	wg.Wait()
	close(early)
	for d := range early {
		t.Errorf("a wait of %v returned early", d)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	k.mu.Lock()
	defer k.mu.Unlock()
	require.Empty(t, k.pending)
	require.Zero(t, k.armed)
	r, err := k.remaining()
	require.NoError(t, err)
	require.Zero(t, r, "left armed")
	require.Nil(t, k.armErr.Load())
}

// TestKickerGrid: the grid is 50µs while kicks wake on time, coarsens by
// doubling (to 800µs at most) while they are seen later than twice the
// grid, and comes back when
// they are on time again; whatever the grid, a kick is never earlier than
// its deadline.
func TestKickerGrid(t *testing.T) {
	k, err := newKicker()
	require.NoError(t, err)
	defer k.file.Close()
	now := int64(0)
	fakeArm(k, &now)
	for _, tc := range []struct{ late, grid time.Duration }{
		{0, 50 * time.Microsecond},
		{100 * time.Microsecond, 50 * time.Microsecond},
		{150 * time.Microsecond, 100 * time.Microsecond},
		{300 * time.Microsecond, 200 * time.Microsecond},
		{5 * time.Millisecond, 800 * time.Microsecond},
	} {
		k.late.Store(int64(tc.late))
		require.Equal(t, tc.grid, k.grid(), "late %v", tc.late)
		dl := time.Now().Add(time.Hour + 123456*time.Nanosecond)
		e := k.add(dl)
		require.GreaterOrEqual(t, e.at, k.mono(dl), "kick earlier than its deadline")
		require.Less(t, e.at-k.mono(dl), int64(tc.grid))
		require.Zero(t, e.at%int64(tc.grid))
		k.remove(e)
	}
	// Kicks seen 2ms late coarsen the grid to its maximum; kicks on time
	// (the timer fired before its kick) bring it back to 50µs.
	k.late.Store(0)
	for range 200 {
		now = 1_000_000_000
		k.observe(now - int64(2*time.Millisecond))
	}
	require.Equal(t, kickGridMax, k.grid())
	for range 200 {
		k.observe(now + 1)
	}
	require.Equal(t, kickGrid, k.grid())
}
