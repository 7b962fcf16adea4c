// Package otelx builds the OpenTelemetry TracerProvider of `differential
// run` from its tracing settings: an OTLP/HTTP exporter (protobuf bodies;
// no gRPC exporter: one exporter module, and every collector serves
// OTLP/HTTP) to one endpoint,
// behind the SDK's batch span processor, with a ratio sampler that follows
// the input's sampling decision when asked (parent-based). The spans
// themselves are chain/chainotel's. ReadEnv reads the standard OTEL_*
// variables that choose the endpoint, the sampler and whether tracing is
// disabled, and refuses values it cannot honour with a message naming the
// variable.
//
// What it owns: the provider it returns, until Shutdown (which flushes
// what is queued). The batch span processor never blocks the chain: when
// its queue is full (the exporter is slow or the endpoint down), spans are
// dropped. Export failures are logged (as warnings, at most one every
// failureLogInterval) instead of going to OpenTelemetry's global error
// handler. Everything else the OTLP exporter reads from the standard
// OTEL_EXPORTER_OTLP_* environment variables (headers, certificates,
// compression, timeout) and the SDK from OTEL_BSP_* (queue and batch
// sizes) still applies; the endpoint given here wins over
// OTEL_EXPORTER_OTLP_ENDPOINT. The resource is service.name=differential
// and the service version, overridden by OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
//
// Safe for concurrent use (the provider is the SDK's).
package otelx
