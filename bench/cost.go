package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/chain"
)

// limiter is the cap W shared by every processor of one design run: at most
// W records are in processing (simulated cost plus processor) at once,
// across all partitions and stages. It also sums the waits asked for and
// the waits the runtime delivered (timers fire late, by up to a
// millisecond on a busy machine), so the report can tell timer overshoot
// from engine overhead.
type limiter struct {
	slots             chan struct{}
	requested, waited atomic.Int64 // ns
	// held sums the time slots were held (ns): ÷ (W × elapsed) is how
	// busy the cap W kept (DesignResult.SlotUse).
	held atomic.Int64
	// inUse counts held slots; idle sums the time none was held (ns),
	// idleSince is when the last slot was freed (unix ns; 0: one is held).
	inUse, idle, idleSince atomic.Int64
}

// acquired and released track the time no slot is held (DesignResult.Idle).
func (l *limiter) acquired() {
	if l.inUse.Add(1) == 1 {
		if since := l.idleSince.Swap(0); since > 0 {
			l.idle.Add(time.Now().UnixNano() - since)
		}
	}
}

func (l *limiter) released() {
	if l.inUse.Add(-1) == 0 {
		l.idleSince.Store(time.Now().UnixNano())
	}
}

// newLimiter is a cap of w slots.
func newLimiter(w int) *limiter {
	return &limiter{slots: make(chan struct{}, w)}
}

func (l *limiter) waitedFor(req, got time.Duration) {
	l.requested.Add(int64(req))
	l.waited.Add(int64(got))
}

// overshoot is waited ÷ requested − 1: how much longer than asked the
// cost timers waited (DesignResult.WaitOvershoot). An idle Go runtime
// sleeps in its network poller, whose timeout is in whole milliseconds, so
// a timer due in 1.3ms may fire at 2ms. Every design's costs wait on the
// same timers, so the overshoot is reported beside each design rather than
// engineered away.
func (l *limiter) overshoot() float64 {
	r := l.requested.Load()
	if r == 0 {
		return 0
	}
	return float64(l.waited.Load())/float64(r) - 1
}

// costProcessor wraps a stage's processor: it takes a slot of the limiter,
// waits for the record's cost (CostHeader; a Go timer, not a spin, so the
// simulated work is I/O-like and uses no CPU; the same for every design),
// runs the real processor and
// frees the slot. Sequence is passed through (it is the cheap, ordered part;
// the engine runs it on the stage goroutine).
type costProcessor struct {
	inner chain.Processor
	lim   *limiter
}

func (c *costProcessor) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	select {
	case c.lim.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	held := time.Now()
	c.lim.acquired()
	defer func() {
		c.lim.held.Add(int64(time.Since(held)))
		c.lim.released()
		<-c.lim.slots
	}()
	if d := costOf(ev.Headers); d > 0 {
		t0 := time.Now()
		if err := waitCost(ctx, d); err != nil {
			return err
		}
		c.lim.waitedFor(d, time.Since(t0))
	}
	return c.inner.Process(ctx, pc, ev)
}

// waitCost waits d (a record's simulated cost) on a Go timer, or until ctx
// is done. It never returns nil before d has passed.
func waitCost(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

type costSequencer struct {
	costProcessor
	seq chain.Sequencer
}

func (c *costSequencer) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return c.seq.Sequence(pc, ev)
}

// withCost wraps p (keeping its Sequencer, if any).
func withCost(p chain.Processor, lim *limiter) chain.Processor {
	cp := costProcessor{inner: p, lim: lim}
	if s, ok := p.(chain.Sequencer); ok {
		return &costSequencer{costProcessor: cp, seq: s}
	}
	return &cp
}

func costOf(hs []chain.Header) time.Duration {
	for _, h := range hs {
		if string(h.Key) == CostHeader {
			us, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil || us <= 0 {
				return 0
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	return 0
}

// countingDecoder starts the clock of a design run at its first decoded
// record (both designs decode every record exactly once, when consumed).
type countingDecoder struct {
	inner chain.Decoder
	prog  *progress
}

func (d countingDecoder) Decode(r *chain.Record) (chain.Decoded, error) {
	d.prog.consumed()
	return d.inner.Decode(r)
}
