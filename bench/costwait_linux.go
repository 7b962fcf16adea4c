package bench

import (
	"container/heap"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// kickSupported: Linux has the timerfd.
const kickSupported = true

// The timerfd's constants (linux/timerfd.h), not in package syscall.
const (
	tfdNonblock     = syscall.O_NONBLOCK
	tfdCloexec      = syscall.O_CLOEXEC
	tfdTimerAbstime = 1
	clockMonotonic  = 1
)

type itimerspec struct {
	interval, value syscall.Timespec
}

// kicker is one timerfd shared by every waiter of the process. It is
// registered with the runtime's network poller (os.NewFile of a
// non-blocking fd) and never read: its expiry, a level the poller watches
// edge-triggered, wakes the poller's epoll_wait on time, and the runtime
// then runs the timers that are due. It stays armed to the earliest
// pending deadline (rounded up to the grid, so a kick is never earlier
// than the Go timer it wakes): a waiter re-arms it when it adds an
// earlier deadline, or when it leaves as the earliest (its timer fired,
// or its context ended) and the next pending one differs. N waiters need
// one fd and about one timerfd_settime per distinct grid cell. The heap's
// mutex is never held across the system call (see flush).
type kicker struct {
	mu      sync.Mutex
	pending kickHeap
	armed   int64 // the earliest pending cell (CLOCK_MONOTONIC ns); 0: none
	// want is the expiry the timerfd should have (0: disarmed), written
	// under mu; dirty says it changed. The system call is made outside mu,
	// by whichever waiter holds setMu (see flush): a waiter preempted in
	// timerfd_settime on a loaded machine must not hold up every waiter's
	// add and remove. applied is what the fd was last set to (under setMu).
	want    atomic.Int64
	dirty   atomic.Bool
	setMu   sync.Mutex
	applied int64
	// arm sets the expiry (0 disarms); tests replace it to record.
	arm func(at int64) error
	// now is CLOCK_MONOTONIC in ns, derived from the Go clock (see mono).
	now func() int64

	fd   int
	file *os.File // keeps fd registered with the poller
	// base maps Go times to CLOCK_MONOTONIC: baseMono was read after
	// baseTime, so mono never maps a time to an earlier instant.
	baseTime time.Time
	baseMono int64
	// late is a moving average (1/16 weight to each wait) of how late
	// after its kick's expiry each kicked wait resumed (ns; 0 when before):
	// the thread's wake-up latency, whatever the grid — and, in a busy
	// process, the woken goroutine's wait for a P, which no grid shortens.
	late atomic.Int64
	// arms counts timerfd_settime calls; armErr is the first failure.
	arms   atomic.Int64
	armErr atomic.Pointer[error]
}

type kickEntry struct {
	at  int64 // grid-rounded deadline, CLOCK_MONOTONIC ns
	idx int
}

type kickHeap []*kickEntry

func (h kickHeap) Len() int           { return len(h) }
func (h kickHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h kickHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *kickHeap) Push(x any) {
	e := x.(*kickEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *kickHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// newKicker opens a timerfd and registers it with the runtime's poller.
func newKicker() (*kicker, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		return nil, fmt.Errorf("timerfd_create: %w", errno)
	}
	k := &kicker{fd: int(fd)}
	k.file = os.NewFile(fd, "cost-wait-timerfd")
	// Only a file the poller watches can take a deadline: this checks that
	// os.NewFile registered the fd with the poller.
	if err := k.file.SetReadDeadline(time.Time{}); err != nil {
		_ = k.file.Close()
		return nil, fmt.Errorf("timerfd not registered with the runtime poller: %w", err)
	}
	k.baseTime = time.Now()
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		_ = k.file.Close()
		return nil, fmt.Errorf("clock_gettime: %w", errno)
	}
	k.baseMono = ts.Nano()
	k.arm = k.settime
	k.now = func() int64 { return k.mono(time.Now()) }
	return k, nil
}

// mono is t on CLOCK_MONOTONIC (never earlier than t; later by the few
// hundred ns between the two clock reads of newKicker).
func (k *kicker) mono(t time.Time) int64 { return k.baseMono + int64(t.Sub(k.baseTime)) }

func (k *kicker) settime(at int64) error {
	var its itimerspec
	if at > 0 {
		its.value = syscall.NsecToTimespec(at)
	}
	k.arms.Add(1)
	_, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, uintptr(k.fd), tfdTimerAbstime, uintptr(unsafe.Pointer(&its)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("timerfd_settime: %w", errno)
	}
	return nil
}

// remaining is the armed timerfd's time to expiry (0: disarmed or fired).
func (k *kicker) remaining() (time.Duration, error) {
	var its itimerspec
	if _, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_GETTIME, uintptr(k.fd), uintptr(unsafe.Pointer(&its)), 0); errno != 0 {
		return 0, fmt.Errorf("timerfd_gettime: %w", errno)
	}
	return time.Duration(its.value.Nano()), nil
}

// setArmed (under mu) makes at the earliest cell and the fd's expiry;
// the caller flushes after unlocking mu.
func (k *kicker) setArmed(at int64) {
	k.armed = at
	k.want.Store(at)
	k.dirty.Store(true)
}

// flush sets the timerfd to want, outside mu. One waiter at a time makes
// the system call; a waiter that finds another one at it leaves its change
// to it: the flusher re-reads want until no change is left (dirty is set
// before TryLock, and checked again after Unlock, so no change is lost).
func (k *kicker) flush() {
	for k.dirty.Load() && k.setMu.TryLock() {
		k.dirty.Store(false)
		if at := k.want.Load(); at != k.applied {
			if err := k.arm(at); err != nil {
				// The Go timer still fires (late): the wait stays
				// correct. The first failure is kept for the report.
				k.armErr.CompareAndSwap(nil, &err)
			}
			k.applied = at
		}
		k.setMu.Unlock()
	}
}

// grid is the cell deadlines are rounded up to: kickGrid, doubled while
// the kicks' wake-up latency (late) exceeds twice it, up to kickGridMax.
// On a quiet machine a kick wakes the runtime within tens of µs and the
// grid stays at 50µs; on a machine short of CPU a woken thread waits for a
// core, precision is lost anyway, and each kick costs a thread wake-up
// (a context switch, several µs of CPU): a coarser grid then serves more
// timers per wake-up, as the runtime's own millisecond sleeps do. The
// cells of every grid are multiples of kickGrid, and each is rounded up,
// so a kick is never earlier than its deadline whatever the grid.
func (k *kicker) grid() time.Duration {
	late := time.Duration(k.late.Load())
	g := kickGrid
	for g < kickGridMax && 2*g < late {
		g *= 2
	}
	return g
}

// observe folds one kicked wait's lateness after its kick (at) into late.
func (k *kicker) observe(at int64) {
	late := max(k.now()-at, 0)
	for {
		old := k.late.Load()
		if k.late.CompareAndSwap(old, old+(late-old)/16) {
			return
		}
	}
}

// add registers the deadline dl and arms the timerfd if dl is the
// earliest.
func (k *kicker) add(dl time.Time) *kickEntry {
	at := k.mono(dl)
	g := int64(k.grid())
	if r := at % g; r != 0 {
		at += g - r
	}
	e := &kickEntry{at: at}
	k.mu.Lock()
	heap.Push(&k.pending, e)
	if k.armed == 0 || at < k.armed {
		k.setArmed(at)
	}
	k.mu.Unlock()
	k.flush()
	return e
}

// remove drops e (its timer fired or its context ended); if it was the
// earliest, the timerfd moves to the next pending deadline, or is disarmed
// when none is left and its expiry is still ahead. A next deadline that has
// already passed is not armed: its timer is due and the runtime, running
// this goroutine, runs it at its next scheduling point.
func (k *kicker) remove(e *kickEntry) {
	k.mu.Lock()
	k.removeLocked(e)
	k.mu.Unlock()
	k.flush()
}

func (k *kicker) removeLocked(e *kickEntry) {
	heap.Remove(&k.pending, e.idx)
	if e.at != k.armed {
		return
	}
	now := k.now()
	if len(k.pending) == 0 {
		if k.armed > now {
			k.setArmed(0)
		} else {
			k.armed = 0
		}
		return
	}
	next := k.pending[0].at
	switch {
	case next == k.armed:
	case next <= now:
		k.armed = next
	default:
		k.setArmed(next)
	}
}

// wait waits d on a Go timer woken on time by the kick.
func (k *kicker) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	// The deadline is taken after the timer's: the kick is never earlier.
	e := k.add(time.Now().Add(d))
	defer k.remove(e)
	select {
	case <-t.C:
		k.observe(e.at)
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

var (
	theKickerOnce sync.Once
	theKicker     *kicker
	theKickerErr  error
)

// processKicker is the process's one kicker, opened on first use.
func processKicker() (*kicker, error) {
	theKickerOnce.Do(func() { theKicker, theKickerErr = newKicker() })
	return theKicker, theKickerErr
}

// kickReady opens the process's kicker (Run calls it before measuring, so
// a refused timerfd is an error, not a silent fallback).
func kickReady() error {
	if _, err := processKicker(); err != nil {
		return fmt.Errorf("CostWait %q: %w", CostWaitKick, err)
	}
	return nil
}

// kickArmError is the first timerfd_settime failure of the process, if any.
func kickArmError() error {
	k, err := processKicker()
	if err != nil || k == nil {
		return err
	}
	if p := k.armErr.Load(); p != nil {
		return *p
	}
	return nil
}

// kickStats describes the process's kicker: its timerfd_settime calls,
// the kicks' wake-up latency (moving average) and the grid it gives.
func kickStats() string {
	k, err := processKicker()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("kick: %d timerfd arms; kicks' wake-up latency %v (moving average), grid %v",
		k.arms.Load(), time.Duration(k.late.Load()).Round(time.Microsecond), k.grid())
}

// kickWait waits on the process's kicker.
func kickWait(ctx context.Context, d time.Duration) error {
	k, err := processKicker()
	if err != nil {
		return timerWait(ctx, d) // Run refused kick already (kickReady)
	}
	return k.wait(ctx, d)
}
