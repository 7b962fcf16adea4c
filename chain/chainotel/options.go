package chainotel

import (
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Option configures a Tracer. Each option's doc states its default.
type Option interface{ apply(*Tracer) }

type optionFunc func(*Tracer)

func (f optionFunc) apply(t *Tracer) { f(t) }

// WithPropagator sets how a trace context is read from a record's headers
// and written into the outputs'. Default: W3C Trace Context
// (propagation.TraceContext: the traceparent and tracestate headers).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(t *Tracer) { t.prop = p })
}

// WithConsumerGroup sets the messaging.consumer.group.name attribute of
// every span. Default: none.
func WithConsumerGroup(group string) Option {
	return optionFunc(func(t *Tracer) {
		if group != "" {
			t.static = append(t.static, semconv.MessagingConsumerGroupName(group))
		}
	})
}

// WithMessageKey adds the record's key as the messaging.kafka.message.key
// attribute. Default off: keys are often user identifiers, which a trace
// backend should not receive unless it is meant to.
func WithMessageKey() Option {
	return optionFunc(func(t *Tracer) { t.key = true })
}
