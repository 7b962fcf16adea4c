package chain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

// fakeTracer records every hook call as "stage@offset: call" lines, per
// span, so a test can compare a record's whole passage through a stage.
type fakeTracer struct {
	mu    sync.Mutex
	spans map[string][]string // "stage@offset" → calls
}

func newFakeTracer() *fakeTracer { return &fakeTracer{spans: map[string][]string{}} }

func (f *fakeTracer) Start(stage string, ev *chain.Event) chain.RecordSpan {
	id := fmt.Sprintf("%s@%d", stage, ev.Offset)
	parent := ""
	for _, h := range ev.Headers {
		if string(h.Key) == "span" {
			parent = string(h.Value)
		}
	}
	f.note(id, "start parent="+parent)
	return &fakeSpan{f: f, id: id}
}

func (f *fakeTracer) note(id, call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spans[id] = append(f.spans[id], call)
}

func (f *fakeTracer) calls() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for id, c := range f.spans {
		out[id] = strings.Join(c, "; ")
	}
	return out
}

type fakeSpan struct {
	f  *fakeTracer
	id string
}

type spanKey struct{}

func (s *fakeSpan) Begun(b chain.BeginInfo) { s.f.note(s.id, fmt.Sprintf("begun %d", b.Offset)) }

func (s *fakeSpan) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, spanKey{}, s.id)
}

func (s *fakeSpan) Processed(attempts, outputs int, err error) {
	s.f.note(s.id, fmt.Sprintf("processed attempts=%d outputs=%d err=%v", attempts, outputs, err))
}

func (s *fakeSpan) Inject(h []chain.Header) []chain.Header {
	s.f.note(s.id, "inject")
	out := make([]chain.Header, 0, len(h)+1)
	for _, x := range h {
		if string(x.Key) != "span" {
			out = append(out, x)
		}
	}
	return append(out, chain.Header{Key: []byte("span"), Value: []byte(s.id)})
}

func (s *fakeSpan) Produced(err error) { s.f.note(s.id, fmt.Sprintf("produced err=%v", err)) }

func (s *fakeSpan) End(o chain.Outcome, err error) {
	s.f.note(s.id, fmt.Sprintf("end %s err=%v", o, err))
}

// dedup skips (as a Sequencer) records whose value ends in "|99".
type dedup struct{ chain.Processor }

func (d dedup) Sequence(_ *chain.Context, ev *chain.Event) (bool, error) {
	return strings.HasSuffix(string(ev.Value), "|99"), nil
}

// TestTracerHooks: every record a stage acts on gets one span from the
// tracer — started with the input's headers, begun, processed, injected
// into each output and dead letter, acknowledged, ended once with how the
// record left the stage — and records a stage's filter skips get none;
// the processor's context is the span's. In strict and key-parallel stages.
func TestTracerHooks(t *testing.T) {
	for _, gate := range []chain.GateScope{chain.GatePartition, chain.GateKey} {
		for _, keyConc := range []int{1, 4} {
			t.Run(fmt.Sprintf("gate=%s/key-concurrency=%d", gate, keyConc), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { testTracerHooks(t, gate, keyConc) })
			})
		}
	}
}

func testTracerHooks(t *testing.T, gate chain.GateScope, keyConc int) {
	ft := newFakeTracer()
	var ctxSpans sync.Map // offset → the span id the processor's context carried
	proc := func(emit int) chain.Processor {
		return chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
			ctxSpans.Store(e.Offset, ctx.Value(spanKey{}))
			if strings.HasPrefix(string(e.Key), "fail") {
				return chain.Permanent(errors.New("refused"))
			}
			shared := make([]chain.Header, 1, 4) // spare capacity: Inject must not write into it
			shared[0] = chain.Header{Key: []byte("app"), Value: []byte("v")}
			for range emit {
				pc.Emit(chain.Message{Key: e.Key, Value: e.Value, Headers: shared})
			}
			return nil
		})
	}
	stages := []chain.Stage{
		{Name: "click", Filter: typeFilter("click"), Processor: proc(1), KeyConcurrency: keyConc},
		{Name: "install", Filter: typeFilter("install"), Processor: proc(2), KeyConcurrency: keyConc, Gate: gate},
		{Name: "purchase", Filter: typeFilter("purchase"), Processor: dedup{proc(0)}, Gate: gate},
	}
	tt := chaintest.New(t, stages, testDecoder, chain.WithTracer(ft))
	tt.Start(0)
	in := func(key, value, span string) chain.Record {
		r := chaintest.Rec(key, value, base)
		if span != "" {
			r.Headers = []chain.Header{{Key: []byte("span"), Value: []byte(span)}}
		}
		return r
	}
	tt.Feed(0,
		in("u1", ev("click", 1), "up-0"),    // 0: processed, one output
		in("u2", "bad", "up-1"),             // 1: invalid, dead-lettered by the first stage
		in("fail", ev("install", 2), ""),    // 2: the processor refuses it: dead-lettered
		in("u1", ev("install", 3), "up-3"),  // 3: two outputs
		in("u1", ev("purchase", 99), ""),    // 4: skipped by the Sequencer
		in("u3", ev("purchase", 5), "up-5"), // 5: processed, no output
	)
	require.NoError(t, tt.Stop())

	want := map[string]string{
		"click@0":    "start parent=up-0; begun 0; processed attempts=1 outputs=1 err=<nil>; inject; produced err=<nil>; end completed err=<nil>",
		"click@1":    "start parent=up-1; begun 1; inject; produced err=<nil>; end dead_lettered err=no separator",
		"install@2":  "start parent=; begun 2; processed attempts=1 outputs=0 err=refused; inject; produced err=<nil>; end dead_lettered err=refused",
		"install@3":  "start parent=up-3; begun 3; processed attempts=1 outputs=2 err=<nil>; inject; inject; produced err=<nil>; end completed err=<nil>",
		"purchase@4": "start parent=; begun 4; end skipped err=<nil>",
		"purchase@5": "start parent=up-5; begun 5; processed attempts=1 outputs=0 err=<nil>; end completed err=<nil>",
	}
	require.Equal(t, want, ft.calls())

	for _, o := range []int64{0, 2, 3, 5} {
		got, _ := ctxSpans.Load(o)
		require.NotNil(t, got, "offset %d: the processor's context carries its span", o)
	}
	out := map[string][]string{}
	for _, m := range tt.Outputs("output") {
		h := headers(m)
		require.Equal(t, "v", h["app"], "the processor's headers are kept")
		out[string(m.Value)] = append(out[string(m.Value)], h["span"])
	}
	require.Equal(t, map[string][]string{
		ev("click", 1):   {"click@0"},
		ev("install", 3): {"install@3", "install@3"},
	}, out, "every output carries its stage span, in place of the input's")
	dlq := map[string]string{}
	for _, m := range tt.Outputs("dlq") {
		h := headers(m)
		n := 0
		for _, x := range m.Headers {
			if string(x.Key) == "span" {
				n++
			}
		}
		require.Equal(t, 1, n, "one span header in the dead letter")
		dlq[h[chain.HeaderDLQOffset]] = h["span"]
	}
	require.Equal(t, map[string]string{"1": "click@1", "2": "install@2"}, dlq)
}

// TestTracerFatalEndsSpanDropped: a record whose processor fails fatally
// ends its span as dropped with the error, and nothing is injected.
func TestTracerFatalEndsSpanDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTracer()
		boom := errors.New("boom")
		stages := []chain.Stage{{Name: "click", Processor: chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error {
			return chain.Fatal(boom)
		})}}
		tt := chaintest.New(t, stages, testDecoder, chain.WithTracer(ft))
		tt.Start(0)
		tt.Append(0, chaintest.Rec("u", ev("click", 1), base))
		synctest.Wait()
		err := tt.Stop()
		require.ErrorIs(t, err, boom)
		require.Equal(t, map[string]string{
			"click@0": "start parent=; begun 0; processed attempts=1 outputs=0 err=boom; end dropped err=boom",
		}, ft.calls())
	})
}

// TestNoTracerAddsNoHeaders: without a tracer, outputs carry exactly the
// processor's headers and dead letters the input's plus the dead-letter
// headers.
func TestNoTracerAddsNoHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, true, 0, nil), testDecoder)
		tt.Start(0)
		tp := chain.Header{Key: []byte("traceparent"), Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
		click := chaintest.Rec("u", ev("click", 1), base)
		click.Headers = []chain.Header{tp}
		bad := chaintest.Rec("u", "bad", base)
		bad.Headers = []chain.Header{tp}
		tt.Feed(0, click, bad)
		require.NoError(t, tt.Stop())
		outs := tt.Outputs("output")
		require.Len(t, outs, 1)
		require.Empty(t, outs[0].Headers)
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 1)
		require.Equal(t, tp, dlq[0].Headers[0], "the input's own trace context, untouched")
		for _, h := range dlq[0].Headers[1:] {
			require.True(t, strings.HasPrefix(string(h.Key), "differential-dlq-"), "unexpected header %q", h.Key)
		}
	})
}
