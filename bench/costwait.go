package bench

import (
	"context"
	"fmt"
	"time"
)

// How the simulated per-record costs wait (Options.CostWait).
//
// An idle Go runtime sleeps in its network poller (epoll_wait on Linux),
// whose timeout is in whole milliseconds: a timer due in 1.3ms is seen
// after a 1ms sleep, then another whole millisecond — a wait of 1.3ms
// takes 2ms or more. On a 1ms median cost the bench's timers waited
// 10–14 % longer than asked (DesignResult.WaitOvershoot), and every design
// pays that on its critical path. CostWaitKick arms, besides the Go timer,
// a Linux timerfd at the deadline (rounded up to a kickGrid grid) that the
// runtime's poller watches: its expiry wakes the poller on time, the
// runtime then finds the timer due and runs it. One timerfd serves every
// waiter of the process, armed to the earliest pending deadline. Both
// values give every design (the chain and both micro-batches) the same
// waits.
const (
	CostWaitTimer = "timer" // a Go timer only
	CostWaitKick  = "kick"  // a Go timer, woken on time by a shared timerfd (Linux)
)

// CostWaits are the values Options.CostWait accepts on this platform.
var CostWaits = costWaits()

// DefaultCostWait is Options.CostWait's default: CostWaitKick where the
// timerfd exists (Linux), CostWaitTimer elsewhere.
var DefaultCostWait = defaultCostWait()

// kickGrid is the finest grid kick deadlines are rounded up to: waiters
// whose deadlines fall in one grid cell share one expiry (one re-arm, one
// wake). When the kicks themselves are seen late (a machine short of CPU:
// the woken thread waits for a core), the grid coarsens by doubling, up to
// kickGridMax, so that fewer wakes serve more timers each (kicker.grid).
const (
	kickGrid    = 50 * time.Microsecond
	kickGridMax = 800 * time.Microsecond
)

func costWaits() []string {
	if kickSupported {
		return []string{CostWaitKick, CostWaitTimer}
	}
	return []string{CostWaitTimer}
}

func defaultCostWait() string {
	if kickSupported {
		return CostWaitKick
	}
	return CostWaitTimer
}

// checkCostWait says why w is not a cost wait of this platform.
func checkCostWait(w string) error {
	switch w {
	case CostWaitTimer:
		return nil
	case CostWaitKick:
		if kickSupported {
			return nil
		}
		return fmt.Errorf("CostWait %q needs Linux's timerfd; use %q on this platform", w, CostWaitTimer)
	}
	return fmt.Errorf("unknown CostWait %q (want %q or %q)", w, CostWaitKick, CostWaitTimer)
}

// costWaiter waits d (a record's simulated cost) or until ctx is done. It
// never returns nil before d has passed.
type costWaiter func(ctx context.Context, d time.Duration) error

// newCostWaiter is the waiter of mode w (checked by checkCostWait).
func newCostWaiter(w string) costWaiter {
	if w == CostWaitKick && kickSupported {
		return kickWait
	}
	return timerWait
}

// timerWait waits on a Go timer only.
func timerWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
