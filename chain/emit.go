package chain

import (
	"errors"
	"fmt"
)

// process runs the processor under the stage's retry policy, then emits the
// outputs; the record completes when Kafka acknowledged them (DESIGN I5,
// I8). A record begun before a stop is still processed, retries included:
// only the shutdown timeout cuts it short (the work context ends), and then
// the record is dropped (not committed; processed again by the next owner)
// and nothing of it is produced. process returns an error only when the
// partition must stop.
func (s *stageRun) process(pc *Context, ev *Event, stream int64, kh uint64) error {
	return s.run(pc, ev, stream, kh, false)
}

// run is process. With unbegun the record is counted in outstanding but not
// yet in the tracker (handle's direct path: run on the stage goroutine, no
// key table, the window known to have room). If its first attempt succeeds
// with no outputs it is begun and completed in one step (beginCompleted);
// otherwise it is begun in the tracker before anything else happens to it
// (retries, outputs, dead letter, drop), so every later step is process's.
// The first attempt is made here, not through the retry policy: no closure
// for a record that succeeds at once.
func (s *stageRun) run(pc *Context, ev *Event, stream int64, kh uint64, unbegun bool) error {
	ctx, sp := s.work, ev.span
	if sp != nil {
		ctx = sp.Context(ctx) // the processor's own spans are children of the stage's
	}
	pc.reset(ev.Offset, unixTime(stream))
	pc.setHorizon(ev.asOf)
	err := s.st.Processor.Process(ctx, pc, ev)
	if unbegun {
		if err == nil && len(pc.out) == 0 && s.work.Err() == nil {
			if sp != nil {
				sp.Processed(1, 0, nil)
			}
			s.processed.Add(1)
			endSpan(sp, OutcomeCompleted, nil)
			s.beginCompleted(ev.Offset)
			return nil
		}
		if berr := s.beginLate(ev.Offset); berr != nil {
			s.drop(ev.Offset)
			ev.endSpan(OutcomeDropped, berr)
			return berr
		}
	}
	attempts := 1
	if err != nil {
		err = s.retry.after(s.work, err, func() error {
			s.retries.Add(1)
			attempts++
			pc.reset(ev.Offset, unixTime(stream))
			pc.setHorizon(ev.asOf)
			return s.st.Processor.Process(ctx, pc, ev)
		})
	}
	if sp != nil {
		sp.Processed(attempts, len(pc.out), err)
	}
	switch {
	case s.work.Err() != nil:
		s.drop(ev.Offset) // abandoned by the shutdown timeout
		ev.endSpan(OutcomeDropped, s.work.Err())
		return nil
	case err == nil:
		s.processed.Add(1)
		return s.emit(pc.out, ev.Offset, kh, sp)
	case IsFatal(err):
		s.drop(ev.Offset)
		ev.endSpan(OutcomeDropped, err)
		return s.recordError(ev.Offset, err)
	default:
		s.deadLetter(ev, kh, err)
		return nil
	}
}

func (s *stageRun) recordError(o int64, err error) error {
	return &RecordError{Stage: s.name, Topic: s.p.topic, Partition: s.p.partition, Offset: o, Err: err}
}

// emit produces msgs and completes o once all are acknowledged; sp is the
// record's span (nil when untraced), its context put in every output.
func (s *stageRun) emit(msgs []Message, o int64, kh uint64, sp RecordSpan) error {
	if len(msgs) == 0 {
		endSpan(sp, OutcomeCompleted, nil)
		s.complete(o, kh)
		return nil
	}
	cfg := &s.p.c.cfg
	for i := range msgs {
		if msgs[i].Topic == "" {
			if cfg.outputTopic == "" {
				s.drop(o)
				err := errors.New("output message names no topic and the chain has no output topic (WithOutputTopic)")
				endSpan(sp, OutcomeDropped, err)
				return s.recordError(o, err)
			}
			msgs[i].Topic = cfg.outputTopic
		}
	}
	if cfg.producer == nil {
		s.drop(o)
		err := errors.New("stage emitted output but the chain has no producer (WithProducer)")
		endSpan(sp, OutcomeDropped, err)
		return s.recordError(o, err)
	}
	if sp != nil {
		injectAll(sp, msgs)
	}
	done := spanDone(sp, OutcomeCompleted, nil, s.acked(o, kh, "produce"))
	s.cut.produce(o, sp, msgs, done)
	return nil
}

// acked returns the done callback of record o's outputs: complete on
// success; otherwise the record is dropped (not committed) and the
// partition fails — unless the shutdown timeout abandoned the record, whose
// late errors fail nothing (partitionRun.fail ignores them).
func (s *stageRun) acked(o int64, kh uint64, what string) func(error) {
	return func(err error) {
		if err == nil {
			s.complete(o, kh)
			return
		}
		err = s.recordError(o, fmt.Errorf("%s: %w", what, err))
		if s.cut.sendFailed(o, err) {
			return
		}
		s.drop(o)
		s.p.fail(err)
	}
}

// deadLetter sends the record with the reason and its source in headers to
// the dead-letter topic (DeadLetter: cut to WithMaxDeadLetterBytes; a
// minimal one if Kafka refuses it for its size); the record completes on
// acknowledgement.
func (s *stageRun) deadLetter(ev *Event, kh uint64, reason error) {
	s.dlq.Add(1)
	cfg := &s.p.c.cfg
	s.p.log.Warn("record dead-lettered", "stage", s.name, "offset", ev.Offset, "reason", reason.Error())
	if cfg.dlqTopic == "" || cfg.producer == nil {
		ev.endSpan(OutcomeDeadLettered, reason)
		s.complete(ev.Offset, kh)
		return
	}
	m := DeadLetter(cfg.dlqTopic, s.name, tracedRecord(ev), reason, cfg.maxDeadLetter)
	done := spanDone(ev.span, OutcomeDeadLettered, reason, s.acked(ev.Offset, kh, "produce dead letter"))
	s.cut.deadLetter(ev.Offset, ev.span, m, done)
}
