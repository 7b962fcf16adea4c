// Package otlptest is an OTLP trace receiver for tests: it serves the
// OpenTelemetry collector's trace service over HTTP/protobuf (POST
// /v1/traces) on a local port, decodes every export request with
// the collector's protobuf types, and keeps the spans for the test to
// inspect. A test waits for spans with Wait (woken by each request, no
// polling); nothing is sent anywhere.
//
// It owns its listener and server until the test ends (testing.TB
// Cleanup). Safe for concurrent use.
package otlptest
