package chain

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/differential-dev/differential/buffer"
)

// loop reads the partition in offset order, through the gate, and begins
// every record: skip, dead-letter, or dispatch to the processor.
func (s *stageRun) loop(ctx context.Context) error {
	if s.kg != nil {
		return s.loopKeyed(ctx)
	}
	defer s.closePoller()
	return s.eachRecord(ctx, s.handle)
}

// eachRecord reads the stage's records from its cursor on and passes each to
// do, in offset order, until ctx ends or the claim ends (nil) or do fails
// for another reason than the stop. A record do was stopped on (its error
// is ctx's) was not begun: the cursor stays at it.
func (s *stageRun) eachRecord(ctx context.Context, do func(context.Context, *Event) error) error {
	for {
		batch, err := s.read(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for i := range batch {
			ev := &batch[i]
			if ev.Offset < s.cursor {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			if err := do(ctx, ev); err != nil {
				if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
					return nil // stopped while waiting: nothing was begun
				}
				return err
			}
			s.cursor = ev.Offset + 1
		}
		if !s.viewed {
			clear(batch)
		}
	}
}

func (s *stageRun) closePoller() {
	if s.poller != nil {
		if err := s.poller.Close(); err != nil {
			s.p.log.Warn("closing poller", "stage", s.name, "err", err)
		}
	}
}

// firstBatchSlots is the capacity a stage's batch starts with. It doubles
// each time a read fills it, up to WithBatchSize: a busy stage reaches the
// full batch within a few reads, and the stages of an instance holding a
// thousand quiet partitions do not each keep a full batch of event slots
// (216 bytes each) for records that come a few at a time.
const firstBatchSlots = 16

// growBatch doubles the batch's capacity, up to the batch size. The batch
// just read keeps the old array; the next read fills the new one.
func (s *stageRun) growBatch() {
	if n := cap(s.batch); n < s.p.c.cfg.batchSize {
		s.batch = make([]Event, 0, min(2*n, s.p.c.cfg.batchSize))
	}
}

// read returns the next batch at the stage's cursor: from the handoff buffer,
// or — when the stage fell behind what the buffer holds — from its own
// poller, until the buffer covers the cursor again. Records come in offset
// order in both modes and the cursor only moves past handled records, so a
// switch neither skips nor repeats an offset (DESIGN I2).
func (s *stageRun) read(ctx context.Context) ([]Event, error) {
	ring := s.p.ring
	s.readPos.Store(s.cursor)
	s.readMoved.notify()
	s.viewed = false
	for {
		if s.mode.Load() == modeBuffered {
			if s.idx == 0 {
				s.p.pace(ctx, s.cursor)
			}
			var b []Event
			var err error
			switch {
			case s.kg != nil:
				b, err = s.readKeyedBuffer(ctx)
			case s.inPlace:
				b, err = ring.View(ctx, s.cursor, cap(s.batch))
				s.viewed = err == nil
			default:
				b, err = ring.Read(ctx, s.cursor, s.batch[:0], s.idx == 0)
			}
			if len(b) == cap(s.batch) {
				s.growBatch()
			}
			if errors.Is(err, buffer.ErrEvicted) {
				if s.poller, err = s.p.src.Poll(ctx, s.cursor); err != nil {
					return nil, fmt.Errorf("stage %q: open poller at %d: %w", s.name, s.cursor, err)
				}
				s.mode.Store(modePolling)
				s.switches.Add(1)
				s.p.log.Debug("stage switched to polling mode", "stage", s.name, "offset", s.cursor)
				continue
			}
			return b, err
		}
		if s.backInBuffer() {
			// Closing a poller can wait for its in-flight fetch (a long
			// poll): do it off the stage goroutine. run waits for it.
			pl := s.poller
			s.poller = nil
			s.p.closers.Go(func() {
				if err := pl.Close(); err != nil {
					s.p.log.Warn("closing poller", "stage", s.name, "err", err)
				}
			})
			s.mode.Store(modeBuffered)
			s.switches.Add(1)
			s.p.log.Debug("stage switched back to buffered mode", "stage", s.name, "offset", s.cursor)
			continue
		}
		recs, err := s.poller.Fetch(ctx, s.recs[:0])
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Only the main stream's end means the claim ended; a poller
			// that ends is a failure. Its io.EOF is not wrapped, so it
			// cannot read as a clean end and stall the followers in
			// silence; any other error keeps its chain.
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("stage %q: polling at offset %d: the poller ended: %s", s.name, s.cursor, err)
			}
			return nil, fmt.Errorf("stage %q: polling at offset %d: %w", s.name, s.cursor, err)
		}
		// A poller may read past what the fetcher delivered: the gap log
		// must know those records' gaps before their horizons are taken.
		s.p.gaps.note(recs)
		b := s.pollBatch[:0]
		for i := range recs {
			b = s.p.appendDecoded(b, &recs[i])
		}
		s.p.steps.note(b) // and their stream time steps
		clear(recs)
		s.recs = recs[:0]
		s.pollBatch = b[:0]
		return b, nil
	}
}

// backInBuffer reports whether a polling stage should read the buffer again:
// its cursor is covered with a quarter of the buffer to spare before the
// writer would evict it again — free slots plus records below the cursor —
// or it caught up with the buffer's head. Without the margin a follower
// slightly slower than the fetcher would flip modes at every batch.
func (s *stageRun) backInBuffer() bool {
	ring := s.p.ring
	if s.cursor >= ring.High() {
		return true
	}
	covered, room := ring.Room(s.cursor)
	return covered && room >= ring.Cap()/4
}

// handle begins one record: gate, stream time, tracker, then skip, dead
// letter or dispatch.
func (s *stageRun) handle(ctx context.Context, ev *Event) error {
	valid := ev.Err == nil
	accept := valid && (s.st.Filter == nil || s.st.Filter(ev))
	s.startSpan(ev, accept)
	if accept && s.leader != nil && !s.p.horizonKnown(ev.Offset) {
		if err := s.awaitHorizon(ctx, ev.Offset); err != nil {
			ev.endSpan(OutcomeDropped, err)
			return err
		}
	}
	rel, err := s.gate(ctx, ev, accept)
	if err != nil {
		ev.endSpan(OutcomeDropped, err)
		return err
	}
	if s.leader != nil {
		if ev.asOf, err = s.horizon(ctx, ev, accept, s.stream); err != nil {
			ev.endSpan(OutcomeDropped, err)
			return err
		}
	}
	streamBefore := s.stream
	if valid {
		if t := ev.Time.UnixNano(); t > s.stream {
			s.stream = t
		}
	}
	var kh uint64
	if s.keys != nil {
		kh = s.p.keyHash(ev.Key)
	}
	pre := s.preDone(ev.Offset)
	if accept && !pre && s.direct && s.room > 0 && ev.Offset <= s.limit {
		// Run on this goroutine, nothing else to register: counted as
		// begun now (a drain waits for it), entered in the tracker by run
		// — together with its completion when it completes at once (one
		// critical section instead of two). The window has
		// room and the offset is within the span, so nothing could have
		// refused the record.
		s.outstanding.Add(1)
		s.observe(ev, accept, rel)
		return s.run(s.pc, ev, streamBefore, 0, true)
	}
	if err := s.begin(ctx, ev.Offset, kh, streamBefore); err != nil {
		ev.endSpan(OutcomeDropped, err)
		return err
	}
	// Observed only once the record is really begun: a record the gate let
	// through but the full window refused before a stop was never begun.
	s.observe(ev, accept, rel)
	if pre {
		ev.endSpan(OutcomeSkipped, nil)
		s.completePre(ev.Offset, kh)
		return nil
	}
	if !accept && (valid || s.idx > 0) {
		s.skipped.Add(1)
		s.complete(ev.Offset, kh)
		return nil
	}
	if !valid {
		// The first stage dead-letters invalid records (DESIGN I7).
		s.deadLetter(ev, kh, ev.Err)
		return nil
	}
	if s.seq != nil {
		act, reason, err := s.sequence(ev, streamBefore)
		switch {
		case err != nil:
			return err
		case act == actDeadLetter:
			s.deadLetter(ev, kh, reason)
			return nil
		case act == actSkip:
			s.skipped.Add(1)
			ev.endSpan(OutcomeSkipped, nil)
			s.complete(ev.Offset, kh)
			return nil
		}
	}
	if s.disp != nil {
		dctx := ctx
		if s.keys != nil {
			// A key-scoped follower may already wait for this record (it
			// was published as begun): a stop must not drop it, or the
			// follower's drain would wait for it until the shutdown
			// timeout. The workers run until the loop is done.
			dctx = s.work
		}
		return s.disp.dispatch(dctx, ev, streamBefore, kh)
	}
	return s.process(s.pc, ev, streamBefore, kh)
}

// sequence runs the stage's Sequencer on the begun record ev (stream: the
// stream time below it) and says what becomes of it: processed, skipped, or
// dead-lettered for reason. Both loops act on the answer in their own way
// (handle at once, the key gate when the record is released). A fatal
// error drops the record and comes back as its RecordError, for the loop to
// stop on.
func (s *stageRun) sequence(ev *Event, stream int64) (act gatedAct, reason, err error) {
	s.pc.reset(ev.Offset, unixTime(stream))
	skip, err := s.seq.Sequence(s.pc, ev)
	switch {
	case err != nil && IsFatal(err):
		s.drop(ev.Offset)
		ev.endSpan(OutcomeDropped, err)
		return actProcess, nil, s.recordError(ev.Offset, err)
	case err != nil:
		return actDeadLetter, err, nil
	case skip:
		return actSkip, nil, nil
	}
	return actProcess, nil, nil
}
