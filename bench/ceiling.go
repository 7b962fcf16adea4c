package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/workload"
)

// The ceilings (the raw consumer and the one-stage no-op chain) read a few
// hundred thousand records in a third of a second. Run in the harness's own
// process they share it with a heap of 350–450 MB that is not theirs — the
// generated stream, the reference model's expectations, the embedded
// broker's logs — and one GC cycle of that heap lands in almost every pass:
// its mark phase lasts most of the pass, takes CPU from the design, and
// turns on the write barriers that every pointer the chain copies into its
// ring slots then pays. A deployed consumer holds no such heap. So, with
// Options.CeilingCommand set (the CLI sets it), every pass runs in a fresh
// child process of its own: the child connects to the brokers (the embedded
// broker stays in the parent and listens on TCP), measures the pass exactly
// as Run measures one in-process (newDesign, measure: every offset once and
// in order for the raw consumer, the last stage's progress for the chain),
// and writes the DesignResult as JSON on stdout.

// CeilingSpec is one ceiling pass for a child process (ServeCeiling): what
// the in-process pass takes from the harness.
type CeilingSpec struct {
	// Brokers are the bootstrap addresses (the embedded broker's TCP
	// listeners, or Options.Brokers).
	Brokers []string `json:"brokers"`
	// Topic is the input; Ends[p] is partition p's end offset — the pass
	// reads every record of partition p below it (the input starts at
	// offset 0) — and len(Ends) is the topic's partition count.
	Topic string  `json:"topic"`
	Ends  []int64 `json:"ends"`
	// Kind is "raw" (the plain sarama consumer group) or "noop_chain" (the
	// one-stage no-op chain).
	Kind string `json:"kind"`
	// Group is the consumer group, fresh for the pass.
	Group string `json:"group"`
	// BufferSize and CommitInterval are the no-op chain's
	// (Options.BufferSize, Options.CommitInterval); Timeout bounds the pass
	// (Options.Timeout). Durations in time.ParseDuration's syntax.
	BufferSize     int    `json:"buffer_size"`
	CommitInterval string `json:"commit_interval"`
	Timeout        string `json:"timeout"`
}

// ErrCeilingSpec is wrapped by ServeCeiling's error when the spec is not
// a pass it can run (malformed, incomplete, or naming a topic the brokers
// do not hold as described).
var ErrCeilingSpec = errors.New("bench: ceiling spec")

// ceilingOptions checks the spec and returns the Options of the child's
// harness.
func (s CeilingSpec) ceilingOptions() (Options, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(s.Brokers) == 0 || slices.Contains(s.Brokers, "") {
		bad("brokers: want one or more host:port, got %q", s.Brokers)
	}
	if s.Topic == "" {
		bad("topic is empty")
	}
	if s.Group == "" {
		bad("group is empty")
	}
	var total int64
	for p, e := range s.Ends {
		if e < 0 {
			bad("ends[%d] is %d: end offsets are >= 0", p, e)
		}
		total += e
	}
	if len(s.Ends) == 0 || total <= 0 {
		bad("ends: want one end offset per partition of the topic, at least one above 0; got %v", s.Ends)
	}
	if k := kind(s.Kind); k != kindRaw && k != kindNoop {
		bad("kind: want %q or %q, got %q", kindRaw, kindNoop, s.Kind)
	}
	if s.BufferSize < 2 {
		bad("buffer_size must be >= 2, got %d", s.BufferSize)
	}
	dur := func(name, v string) time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("%s: want a duration > 0 (e.g. 200ms), got %q", name, v)
		}
		return d
	}
	o := Options{BufferSize: s.BufferSize, CommitInterval: dur("commit_interval", s.CommitInterval), Timeout: dur("timeout", s.Timeout)}
	if len(errs) > 0 {
		return Options{}, fmt.Errorf("%w: %s", ErrCeilingSpec, strings.Join(errs, "; "))
	}
	return o, nil
}

// ReadCeilingSpec decodes one CeilingSpec (JSON; unknown fields and
// trailing data refused) and checks it.
func ReadCeilingSpec(r io.Reader) (CeilingSpec, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s CeilingSpec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("no spec on stdin (want one JSON object)")
		}
		return CeilingSpec{}, fmt.Errorf("%w: %w", ErrCeilingSpec, err)
	}
	if dec.More() {
		return CeilingSpec{}, fmt.Errorf("%w: more than one JSON value", ErrCeilingSpec)
	}
	if _, err := s.ceilingOptions(); err != nil {
		return CeilingSpec{}, err
	}
	return s, nil
}

// ServeCeiling is the child process of a ceiling pass (the CLI's hidden
// `bench-ceiling`): it reads a CeilingSpec from stdin, runs the pass with
// the engine's logs to logger (nil: discarded) and its progress line to
// stderr, and writes the DesignResult as one JSON object on stdout. A spec
// it cannot run fails with ErrCeilingSpec, before anything runs; a pass
// that stalls past the spec's Timeout, loses or repeats an offset, or
// errors fails with nothing on stdout.
func ServeCeiling(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) error {
	spec, err := ReadCeilingSpec(stdin)
	if err != nil {
		return err
	}
	r, err := RunCeiling(ctx, spec, stderr, logger)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}

// RunCeiling runs one ceiling pass in this process, against spec.Brokers,
// as Run does in-process, and returns its result (OwnProcess set: the
// caller is the pass's own process).
func RunCeiling(ctx context.Context, spec CeilingSpec, progress io.Writer, logger *slog.Logger) (*DesignResult, error) {
	o, err := spec.ceilingOptions()
	if err != nil {
		return nil, err
	}
	o.Progress, o.Logger = progress, logger
	c, err := openBroker(spec.Brokers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }() // a real cluster to it: deletes nothing it did not create
	if err := checkInput(c, spec); err != nil {
		return nil, err
	}
	h := &harness{o: o.withDefaults(), c: c, cfg: attributionConfig(), tag: fmt.Sprintf(" [child %d]", os.Getpid())}
	pt := point{name: "ceiling", wc: workload.Config{Partitions: len(spec.Ends)}, workers: 1}
	r, err := h.measure(ctx, runSpec{kind: kind(spec.Kind), pt: pt, topic: spec.Topic, ends: spec.Ends, group: spec.Group})
	if err != nil {
		return nil, err
	}
	r.Records = int(sum(spec.Ends))
	r.OwnProcess = true
	return r, nil
}

// checkInput refuses a spec whose topic does not have len(Ends) partitions
// each holding its end offset: the pass would wait for records that never
// come until Timeout.
func checkInput(c *broker, spec CeilingSpec) error {
	client, err := sarama.NewClient(c.Addrs(), c.Config())
	if err != nil {
		return fmt.Errorf("bench: ceiling: %w", err)
	}
	defer func() { _ = client.Close() }()
	parts, err := client.Partitions(spec.Topic)
	if err != nil {
		return fmt.Errorf("%w: topic %s: %w", ErrCeilingSpec, spec.Topic, err)
	}
	if len(parts) != len(spec.Ends) {
		return fmt.Errorf("%w: topic %s has %d partitions, the spec gives %d end offsets", ErrCeilingSpec, spec.Topic, len(parts), len(spec.Ends))
	}
	for p, end := range spec.Ends {
		hw, err := client.GetOffset(spec.Topic, int32(p), sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("bench: ceiling: topic %s partition %d: %w", spec.Topic, p, err)
		}
		if hw < end {
			return fmt.Errorf("%w: topic %s partition %d ends at offset %d, below the spec's end %d", ErrCeilingSpec, spec.Topic, p, hw, end)
		}
	}
	return nil
}

// measureChild runs one ceiling pass in a fresh child process
// (Options.CeilingCommand, a CeilingSpec on its stdin) and returns the
// DesignResult it wrote on stdout. The child's stderr goes to
// Options.Progress (its last lines also into the error when it fails). The
// child is killed when ctx ends or when it overruns Options.Timeout (plus
// a grace of a quarter of it, at most 10s, in which the child reports its
// own stall): no pass outlives the call. On Linux the kernel also kills it
// if this process dies first (dieWithParent).
func (h *harness) measureChild(ctx context.Context, s runSpec) (*DesignResult, error) {
	o := h.o
	spec := CeilingSpec{
		Brokers: h.c.Addrs(), Topic: s.topic, Ends: s.ends, Kind: string(s.kind), Group: h.c.name("group"),
		BufferSize: o.BufferSize, CommitInterval: o.CommitInterval.String(), Timeout: o.Timeout.String(),
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// The harness's heap collected before the pass: the embedded broker
	// allocates in this process while it serves the child, and must not
	// start a GC cycle of this heap (its mark workers would take a core
	// from the child) during the pass.
	runtime.GC()
	limit := o.Timeout + min(o.Timeout/4, 10*time.Second)
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	argv := o.CeilingCommand
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr := &tailWriter{w: o.Progress}
	cmd.Stderr = stderr
	// After a kill, do not wait long for pipes a descendant might hold.
	cmd.WaitDelay = time.Second
	release := dieWithParent(cmd)
	err = cmd.Run()
	release()
	pid := 0
	if cmd.Process != nil {
		pid = cmd.Process.Pid
	}
	what := fmt.Sprintf("bench: %s pass in a child process (pid %d, %s)", s.kind, pid, strings.Join(argv, " "))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: killed: %w", what, ctx.Err())
	case runCtx.Err() != nil:
		return nil, fmt.Errorf("%s: killed: still running after %v (Timeout %v)%s", what, limit, o.Timeout, stderr.tail())
	default:
		return nil, fmt.Errorf("%s: %w%s", what, err, stderr.tail())
	}
	var r DesignResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%s: its result is not a DesignResult (%w): %q%s", what, err, stdout.String(), stderr.tail())
	}
	if r.Design != string(s.kind) || r.Records != int(sum(s.ends)) || !r.OwnProcess {
		return nil, fmt.Errorf("%s: its result is for another pass: design %q, %d records, own process %v", what, r.Design, r.Records, r.OwnProcess)
	}
	return &r, nil
}

// tailWriter passes writes to w and keeps the last tailBytes of them.
type tailWriter struct {
	w  io.Writer
	mu sync.Mutex
	b  []byte
}

const tailBytes = 4 << 10

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-tailBytes:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

// tail is "; its stderr ended: …" (nothing when it wrote nothing).
func (t *tailWriter) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return "; its stderr ended:\n" + s
}
