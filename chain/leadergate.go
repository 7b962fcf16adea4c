package chain

import (
	"context"
	"math"
	"runtime"
	"time"
)

// gateSpins is how many times a blocked follower yields before it sleeps on
// its leader's signal (leaderWait), in either gate.
const gateSpins = 16

// gate is the LimitedEventProcessor: a follower begins offset o with event
// time t only when its leader's position is > o + OffsetDistance and (for
// records it processes) the leader's watermark is > t + Lateness, or when
// the log shows the leader idle after a record L ≥ o that it completed
// (gapLog; then it is released against the leader position L+1). It waits
// on the leader's progress signal, or a timer for the idle deadline at the
// live tail — never a polling loop. The caller sets the record's horizon
// (Context.Horizon), whichever way it was released.
func (s *stageRun) gate(ctx context.Context, ev *Event, processing bool) (release, error) {
	l := s.leader
	if l == nil {
		return release{leaderNext: -1}, nil
	}
	cfg := &s.p.c.cfg
	o := ev.Offset
	need := int64(0)
	if processing {
		need = addSaturating(ev.Time.UnixNano(), int64(cfg.lateness))
	}
	if r := s.seen; passes(r.leaderNext, r.leaderWM, o, cfg.offsetDistance, processing, need) {
		return r, nil
	}
	var r release
	var ln int64
	err := s.leaderWait(ctx, &l.progress, nil, func() bool {
		var lwm int64
		ln, lwm = l.cp.load()
		if passes(ln, lwm, o, cfg.offsetDistance, processing, need) {
			s.seen = release{leaderNext: ln, leaderWM: lwm}
			r = s.seen
			return true
		}
		if ln > o {
			// Idle over the log: the leader completed everything up to a
			// gap at or after o (see gapLog).
			if gl, ok := s.p.gaps.first(o); ok && gl < ln {
				s.idles.Add(1)
				r = release{leaderNext: gl + 1, leaderWM: lwm, idle: true}
				return true
			}
		}
		return false
	}, func() bool {
		// The leader completed everything fetched: the log shows it idle
		// once its end is confirmed past the last record's timestamp +
		// IdleTimeout.
		return ln > o && ln >= s.p.ring.High()
	})
	if err != nil {
		return release{}, err
	}
	return r, nil
}

// passes is the partition gate's rule: a leader at checkpoint (next, wm)
// lets its follower begin offset o when next > o + distance and, for a
// record the follower processes, wm > need (the record's event time +
// Lateness, saturating). So a follower never passes its leader's
// checkpoint minus the distance, in offsets and in event time.
func passes(next, wm, o, distance int64, processing bool, need int64) bool {
	return next > o+distance && (!processing || wm > need)
}

// leaderWait is the follower's wait for its leader, the same in both gates
// (gate: the leader's completions; admission: its begins). released looks
// at the leader once and reports whether the record may go, the caller
// keeping what it found; atTail reports, after a look that did not release
// it, whether the leader has passed everything fetched, so that only the
// log showing it idle at the live tail (tailGap) can release the record.
// Between looks the follower yields gateSpins times, then sleeps on sig
// (the leader's signal for what released reads), the key gate's wake when
// g is set (which it serves before every yield and whenever a key moved),
// the idle deadline's timer and the end check's answer — never a polling
// loop. It returns nil once released, or a service error, or ctx's error.
func (s *stageRun) leaderWait(ctx context.Context, sig *signal, g *keyGate, released, atTail func() bool) error {
	var ch <-chan struct{}
	spins := 0
	for {
		if released() {
			return nil
		}
		if ch == nil {
			if g != nil {
				if err := g.service(); err != nil {
					return err
				}
			}
			if spins < gateSpins {
				// The leader is usually a few records ahead and running on
				// the other core: yielding a few times is far cheaper than
				// sleeping on the signal and being woken per record.
				spins++
				runtime.Gosched()
				continue
			}
			// Register, then check again before blocking (see signal).
			ch = sig.wait()
			continue
		}
		var wk <-chan struct{} // nil without a key gate: never ready
		if g != nil {
			if wk = g.wake.wait(); g.hasMoved.Load() {
				ch = nil
				continue
			}
		}
		var timer *time.Timer
		var tc <-chan time.Time
		var answer <-chan struct{}
		if atTail() {
			ok, at, ans := s.p.tailGap(ctx, s)
			if ok {
				ch = nil
				continue // the gap is in the log now
			}
			if !at.IsZero() {
				timer = time.NewTimer(time.Until(at))
				tc = timer.C
			}
			answer = ans
		}
		select {
		case <-ch:
		case <-wk:
		case <-tc:
		case <-answer:
		case <-ctx.Done():
		}
		if timer != nil {
			// Each wait arms its own timer, so stopping it is enough: no
			// later wait reads its channel.
			timer.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ch = nil
	}
}

// addSaturating is t + d for d >= 0, or math.MaxInt64 when that overflows:
// an event time near the end of what int64 nanoseconds hold plus the
// lateness must not wrap around to a time that every watermark passes (the
// gate would release early); saturated, only idleness releases it.
func addSaturating(t, d int64) int64 {
	if t > math.MaxInt64-d {
		return math.MaxInt64
	}
	return t + d
}

// release is the leader's checkpoint at the instant the gate let a record
// through (leaderNext -1 for the first stage).
type release struct {
	leaderNext, leaderWM int64
	idle                 bool
}

func (s *stageRun) observe(ev *Event, processing bool, r release) {
	o := s.p.c.cfg.observer
	if o == nil && ev.span == nil {
		return
	}
	b := BeginInfo{
		Topic: s.p.topic, Partition: s.p.partition, Stage: s.idx, Offset: ev.Offset,
		EventTime: ev.Time, Processing: processing,
		LeaderNext: r.leaderNext, LeaderWatermark: unixTime(r.leaderWM), Idle: r.idle,
	}
	if o != nil {
		o.Begin(b)
	}
	if ev.span != nil {
		ev.span.Begun(b)
	}
}
