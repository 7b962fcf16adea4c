package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, flattened.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string // hexadecimal; ParentSpanID "" for a root
	Service                       string // the resource's service.name
	Scope                         string // the instrumentation scope
	Attrs                         map[string]string
	Events                        []string
}

// Receiver collects the spans exported to it.
type Receiver struct {
	mu       sync.Mutex
	spans    []Span
	requests int
	changed  chan struct{} // closed and replaced at every request
}

func newReceiver() *Receiver { return &Receiver{changed: make(chan struct{})} }

// NewHTTP serves OTLP over HTTP/protobuf until the test ends and returns
// the receiver and its base URL (http://127.0.0.1:port).
func NewHTTP(tb testing.TB) (*Receiver, string) {
	r := newReceiver()
	srv := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	tb.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "otlptest: POST /v1/traces only", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		http.Error(w, "otlptest: not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&m)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := value(find(rs.GetResource().GetAttributes(), "service.name"))
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Service: service, Scope: ss.GetScope().GetName(),
					Attrs: map[string]string{},
				}
				for _, kv := range s.GetAttributes() {
					sp.Attrs[kv.GetKey()] = value(kv)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func find(kvs []*commonpb.KeyValue, key string) *commonpb.KeyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv
		}
	}
	return nil
}

// value renders an attribute's value as text (numbers in decimal).
func value(kv *commonpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	v := kv.GetValue()
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is the number of export requests received.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Wait returns the spans once done(spans) holds, re-checking at every
// request; it fails the test after timeout.
func (r *Receiver) Wait(tb testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans := append([]Span(nil), r.spans...)
		ch := r.changed
		r.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-ch:
		case <-deadline.C:
			tb.Fatalf("otlptest: timed out after %v waiting for spans; %d received", timeout, len(spans))
			return nil
		}
	}
}
