package chain

import "context"

// Tracer traces records through the chain's stages (WithTracer): for every
// record a stage acts on — processes, or dead-letters — it starts one span,
// a child of the trace context the record's headers carry, and the span's
// context goes into the headers of the record's outputs and dead letter.
// The OpenTelemetry implementation is package chain/chainotel; the chain
// itself knows nothing of OpenTelemetry.
//
// Start is called from the stage goroutines, concurrently; the RecordSpan it
// returns is then used for that one record and stage only, by one goroutine
// at a time (the stage goroutine, a key-parallel worker, then the producer's
// acknowledgement callback), never concurrently.
type Tracer interface {
	// Start is called when stage takes record ev, before the follower gate:
	// the time until RecordSpan.Begun is the gate wait. ev is valid only
	// during the call (its headers hold the parent trace context). It
	// returns nil to leave the record untraced.
	Start(stage string, ev *Event) RecordSpan
}

// RecordSpan is one record's passage through one stage. The chain calls
// Begun once the record is begun, then Processed (if the stage's processor
// ran), Inject for every output and the dead letter, Produced when Kafka
// acknowledged them, and End exactly once (for a record the shutdown
// timeout abandons in a processor that ignores its context: if it ever
// returns). Every method must be fast and must not block: Produced and End
// run on the producer's acknowledgement callback.
type RecordSpan interface {
	// Begun: the follower gate released the record (the leader's
	// checkpoint then is in b) and the stage's in-flight window had room.
	Begun(b BeginInfo)
	// Context returns ctx carrying the span: the context the stage's
	// processor gets, so its own spans are children of this one.
	Context(ctx context.Context) context.Context
	// Processed: the processor returned after attempts attempts, with the
	// last attempt's error (nil: it succeeded and emitted outputs).
	Processed(attempts, outputs int, err error)
	// Inject returns headers h with the span's trace context (W3C
	// traceparent, tracestate) in place of any h carried: a new slice; h
	// is not modified (a processor may share it between messages).
	Inject(h []Header) []Header
	// Produced: Kafka acknowledged the record's outputs or dead letter (nil)
	// or refused them.
	Produced(err error)
	// End ends the span: how the record left the stage, and the error that
	// made it so (the dead-letter reason, the fatal or produce error), or
	// nil.
	End(o Outcome, err error)
}

// Outcome is how a record left a stage (RecordSpan.End).
type Outcome uint8

const (
	// OutcomeCompleted: processed, every output acknowledged.
	OutcomeCompleted Outcome = iota
	// OutcomeSkipped: the stage's Sequencer skipped it (a duplicate).
	OutcomeSkipped
	// OutcomeDeadLettered: dead-lettered (invalid, or the processor failed
	// for good); the dead letter is acknowledged, or there is no
	// dead-letter topic.
	OutcomeDeadLettered
	// OutcomeDropped: not completed — a fatal error, a refused output, a
	// stop before it began, or the shutdown timeout; the partition's next
	// owner processes it again.
	OutcomeDropped
)

var outcomeNames = [...]string{"completed", "skipped", "dead_lettered", "dropped"}

// String is the outcome's name: completed, skipped, dead_lettered, dropped.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// startSpan starts ev's span for this stage when the chain traces and the
// stage acts on the record (accept, or the first stage dead-letters it).
func (s *stageRun) startSpan(ev *Event, accept bool) {
	if t := s.p.c.cfg.tracer; t != nil && (accept || (ev.Err != nil && s.idx == 0)) {
		ev.span = t.Start(s.name, ev)
	}
}

// endSpan ends ev's span, if it has one.
func (ev *Event) endSpan(o Outcome, err error) {
	if sp := ev.span; sp != nil {
		ev.span = nil
		sp.End(o, err)
	}
}

// spanDone wraps done, the acknowledgement callback of a record's outputs
// (or dead letter), so that sp hears of the acknowledgement and ends —
// before done completes the record, so the next stage's span for it
// starts after this one ended. With no span it is done itself.
func spanDone(sp RecordSpan, o Outcome, reason error, done func(error)) func(error) {
	if sp == nil {
		return done
	}
	return func(err error) {
		sp.Produced(err)
		if err != nil {
			sp.End(OutcomeDropped, err)
		} else {
			sp.End(o, reason)
		}
		done(err)
	}
}

// injectAll puts sp's trace context in every message's headers.
func injectAll(sp RecordSpan, msgs []Message) {
	for i := range msgs {
		msgs[i].Headers = sp.Inject(msgs[i].Headers)
	}
}

// endSpan ends sp, if not nil.
func endSpan(sp RecordSpan, o Outcome, err error) {
	if sp != nil {
		sp.End(o, err)
	}
}

// tracedRecord is the record a dead letter is built from: ev's own, or a
// copy whose headers carry ev's span context (in place of the input's).
func tracedRecord(ev *Event) *Record {
	if ev.span == nil {
		return &ev.Record
	}
	r := ev.Record
	r.Headers = ev.span.Inject(r.Headers)
	return &r
}
