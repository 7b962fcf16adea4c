// Package chainotel traces a chain's records with OpenTelemetry: the
// adapter between the engine's tracing hooks (chain.Tracer,
// chain.RecordSpan) and an OpenTelemetry TracerProvider, so the engine core
// imports no OpenTelemetry code. Give New's Tracer to chain.WithTracer.
//
// # What it owns
//
// One span per record per stage that acts on it (processes or
// dead-letters it; records a stage's filter skips get none), named
// "process <stage>", of kind Consumer, started when the stage takes the
// record — before the follower gate — and ended when the record leaves the
// stage: its outputs (or dead letter) acknowledged by Kafka, skipped as a
// duplicate, or dropped. Its parent is the trace context in the input
// record's headers (W3C traceparent and tracestate by default,
// WithPropagator); a record without one starts a new trace. The time from
// the start to the "begun" event is the gate wait (differential.gate.wait_seconds),
// from "begun" to "processed" the processor (retries included), from
// "processed" to the end the produce. One span with events rather than
// child spans: the three phases are strictly sequential in one stage, the
// events mark their boundaries exactly, and a span per record per stage is
// already the export volume to budget for.
//
// Attributes: messaging.system=kafka, messaging.operation.type and .name
// process, messaging.destination.name (the input topic),
// messaging.destination.partition.id, messaging.kafka.offset,
// messaging.message.body.size, messaging.consumer.group.name
// (WithConsumerGroup), messaging.kafka.message.key (WithMessageKey only),
// differential.stage, differential.event.type, differential.event.time,
// differential.gate.wait_seconds and, at the end, differential.outcome
// (completed, skipped, dead_lettered, dropped). Events: begun (followers:
// the leader's position, watermark and idleness that released the record),
// processed (attempts, outputs; the processor's last error as an
// exception), produced or produce failed. Status Error for a dead letter
// (its reason) and for a record dropped by an error other than a stop.
//
// # Propagation
//
// Every output and dead letter of a traced record carries the stage span's
// context in its headers, in place of any traceparent/tracestate the
// processor or the input put there: the next service's spans are children
// of the stage's, in the same trace as the input. An unsampled span (the
// sampler's decision, e.g. a parent-based sampler and an unsampled input)
// records nothing and exports nothing, but its context still propagates,
// with the sampled flag off, so the trace id goes on. A processor that
// starts spans of its own from its context gets children of the stage's.
//
// # Concurrency
//
// A Tracer is safe for concurrent use by every partition and stage; each
// span is used by one goroutine at a time, as chain.RecordSpan says. The
// TracerProvider's span processor decides what export costs the chain: the
// SDK's batch span processor never blocks a stage (a full queue drops
// spans).
package chainotel
