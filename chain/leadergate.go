package chain

import (
	"context"
	"math"
	"runtime"
	"time"
)

// gateSpins is how many times a blocked follower yields before it sleeps on
// its leader's progress signal.
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
	if r := s.seen; r.leaderNext > o+cfg.offsetDistance && (!processing || r.leaderWM > need) {
		return r, nil
	}
	var ch <-chan struct{}
	spins := 0
	for {
		ln, lwm := l.cp.load()
		if ln > o+cfg.offsetDistance && (!processing || lwm > need) {
			s.seen = release{leaderNext: ln, leaderWM: lwm}
			return s.seen, nil
		}
		if ln > o {
			// Idle over the log: the leader completed everything up to a
			// gap at or after o (see gapLog).
			if gl, ok := s.p.gaps.first(o); ok && gl < ln {
				s.idles.Add(1)
				return release{leaderNext: gl + 1, leaderWM: lwm, idle: true}, nil
			}
		}
		if ch == nil {
			if spins < gateSpins {
				// The leader is usually a few records ahead and running on
				// the other core: yielding a few times is far cheaper than
				// sleeping on the signal and being woken per record.
				spins++
				runtime.Gosched()
				continue
			}
			// Register, then check again before blocking (see signal).
			ch = l.progress.wait()
			continue
		}
		var timer *time.Timer
		var tc <-chan time.Time
		var answer <-chan struct{}
		if ln > o && ln >= s.p.ring.High() {
			// The leader completed everything fetched: the log shows it
			// idle once its end is confirmed past the last record's
			// timestamp + IdleTimeout.
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
		case <-tc:
		case <-answer:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return release{}, ctx.Err()
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
