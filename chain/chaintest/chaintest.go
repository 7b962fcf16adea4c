// Package chaintest runs a chain with no Kafka: records are fed into
// in-memory partition logs, outputs and commits are captured, and WaitIdle
// returns once every stage of every partition has completed everything fed —
// deterministic, no sleeps. It is for the engine's own tests and for users
// testing their processors inside a real chain (the goka tester idea).
//
// New takes a chain's stages and decoder; NewWith takes a constructor
// instead (a library's own, e.g. attribution.NewChain), so a test runs the
// chain exactly as the library wires it.
//
// A Tester keeps its logs, commits and store across Stop/Start, so a test can
// stop a chain and start it again to check what a restart resumes from.
//
// With UseChangelog it simulates a fleet whose state follows its partitions
// (DESIGN.md "State that follows its partition"): an in-memory Changelog shared by every chain, and a local
// store per simulated instance; Move stops the chain and starts partitions
// on another instance, which must restore their state from the changelog.
// FailCommits, ResetOffset and the Changelog's FailAppends and BeforeAppend
// inject the failures a real fleet sees.
package chaintest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/store"
)

// Tester drives one chain over in-memory partitions of one topic.
type Tester struct {
	tb    testing.TB
	topic string
	build func(opts ...chain.Option) (*chain.Chain, error)
	opts  []chain.Option

	changed signal

	mu struct {
		sync.Mutex
		logs    map[int32]*Log
		commits map[int32][]Commit
		outputs []chain.Message
		acks    AckMode
		held    []func(error)
		discard bool
		counts  map[string]int
		maxSize int
		// UseChangelog: the shared changelog, every simulated instance's
		// local store, and the instance the next Start runs on.
		changelog *Changelog
		instances map[string]*store.Memory
		instance  string
		// failCommits, when > 0, makes that many next commits fail.
		failCommits int
		// txn: UseTransactions.
		txn *Transactor
	}

	ch      *chain.Chain
	running []int32
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errMu   sync.Mutex
	errs    []error
}

// Commit is one commit the chain made.
type Commit struct {
	Offset   int64
	Metadata string
}

// AckMode says how the fake producer acknowledges.
type AckMode int

const (
	// AckImmediately acknowledges inside Produce (the default).
	AckImmediately AckMode = iota
	// AckAsync acknowledges on a new goroutine, so acknowledgements arrive
	// in any order.
	AckAsync
	// AckHold keeps acknowledgements until Release (simulates a slow broker
	// or a crash before acknowledgement).
	AckHold
)

// Topic is the input topic name the tester uses.
const Topic = "input"

// New builds a tester for the given chain definition; opts are passed to
// chain.New after the tester's own (producer, observer, output and
// dead-letter topics), so a test may override the producer and topics; a
// test's chain.WithObserver adds to the tester's observer (observers
// compose). Without a chain.WithStore option the chain has no store.
func New(tb testing.TB, stages []chain.Stage, dec chain.Decoder, opts ...chain.Option) *Tester {
	return NewWith(tb, func(opts ...chain.Option) (*chain.Chain, error) { return chain.New(stages, dec, opts...) }, opts...)
}

// NewWith builds a tester whose chain is made by build (e.g. a library's
// own constructor, such as attribution.NewChain bound to its
// configuration), which is given the tester's options followed by opts at
// every Start.
func NewWith(tb testing.TB, build func(opts ...chain.Option) (*chain.Chain, error), opts ...chain.Option) *Tester {
	t := &Tester{tb: tb, topic: Topic, build: build, opts: opts}
	t.mu.logs = map[int32]*Log{}
	t.mu.commits = map[int32][]Commit{}
	tb.Cleanup(func() { t.Stop() })
	return t
}

// SetAckMode changes how outputs are acknowledged from now on.
func (t *Tester) SetAckMode(m AckMode) {
	t.mu.Lock()
	t.mu.acks = m
	t.mu.Unlock()
}

// DiscardOutputs makes the fake producer count outputs (OutputCount)
// instead of keeping them, for long runs that measure memory.
func (t *Tester) DiscardOutputs() {
	t.mu.Lock()
	t.mu.discard = true
	t.mu.Unlock()
}

// SetMaxMessageBytes makes the fake producer refuse, as Kafka does, every
// call with a message whose key, value and headers exceed n bytes: done gets
// an error wrapping chain.ErrMessageTooLarge. 0 (the default) accepts any
// size.
func (t *Tester) SetMaxMessageBytes(n int) {
	t.mu.Lock()
	t.mu.maxSize = n
	t.mu.Unlock()
}

// OutputCount is how many messages were acknowledged to topic.
func (t *Tester) OutputCount(topic string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.mu.counts[topic]
	for _, m := range t.mu.outputs {
		if m.Topic == topic {
			n++
		}
	}
	return n
}

// Release acknowledges every held output (AckHold) with err.
func (t *Tester) Release(err error) {
	t.mu.Lock()
	held := t.mu.held
	t.mu.held = nil
	t.mu.Unlock()
	for _, done := range held {
		done(err)
	}
}

// Log returns partition p's log, creating it.
func (t *Tester) Log(p int32) *Log {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.mu.logs[p]
	if !ok {
		l = newLog(t.topic, p)
		t.mu.logs[p] = l
	}
	return l
}

// Start runs the chain over the given partitions (each resumes from its last
// commit in this tester). It fails the test if the chain is already running.
func (t *Tester) Start(partitions ...int32) {
	t.tb.Helper()
	if t.cancel != nil {
		t.tb.Fatalf("chaintest: Start while running")
	}
	t.mu.Lock()
	var prod chain.Option = chain.WithProducer(producer{t})
	if x := t.mu.txn; x != nil {
		prod = chain.WithExactlyOnce(x)
	}
	t.mu.Unlock()
	opts := append([]chain.Option{
		prod,
		chain.WithObserver(observer{t}),
		chain.WithOutputTopic("output"),
		chain.WithDLQTopic("dlq"),
	}, t.opts...)
	opts = append(opts, t.changelogOptions()...)
	ch, err := t.build(opts...)
	if err != nil {
		t.tb.Fatalf("chaintest: %v", err)
	}
	t.ch = ch
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	for _, p := range partitions {
		l := t.Log(p)
		t.mu.Lock()
		cs := t.mu.commits[p]
		t.mu.Unlock()
		a := chain.Assignment{Topic: t.topic, Partition: p, Committed: -1, Source: l, Committer: committer{t, p}}
		// The claim starts at the committed offset or, with none, at the
		// log's beginning, like a group with auto.offset.reset=earliest.
		cursor := l.Start()
		if n := len(cs); n > 0 {
			a.Committed, a.Metadata = cs[n-1].Offset, cs[n-1].Metadata
			cursor = max(a.Committed, 0)
		}
		l.mu.Lock()
		l.cursor = cursor
		l.onFetch = t.changed.notify
		l.mu.Unlock()
		t.running = append(t.running, p)
		t.wg.Go(func() {
			if err := ch.RunPartition(ctx, a); err != nil {
				t.errMu.Lock()
				t.errs = append(t.errs, err)
				t.errMu.Unlock()
				t.changed.notify()
			}
		})
	}
}

// Chain returns the running chain (nil before Start).
func (t *Tester) Chain() *chain.Chain { return t.ch }

// Stop stops the chain cleanly (drain, final commit) and returns the
// partitions' errors joined.
func (t *Tester) Stop() error {
	if t.cancel == nil {
		return nil
	}
	t.cancel()
	t.wg.Wait()
	t.cancel = nil
	t.running = nil
	t.errMu.Lock()
	defer t.errMu.Unlock()
	err := errors.Join(t.errs...)
	t.errs = nil
	return err
}

// Append adds records to partition p's log without waiting; Offsets are
// assigned by the log (Record.Offset is ignored), Topic and Partition set.
func (t *Tester) Append(p int32, recs ...chain.Record) {
	t.Log(p).Append(recs...)
}

// Feed appends records to partition p and waits until the chain is idle.
func (t *Tester) Feed(p int32, recs ...chain.Record) {
	t.tb.Helper()
	t.Append(p, recs...)
	t.WaitIdle()
}

// WaitIdle blocks until every stage of every running partition has
// completed every record in its log (then nothing is in flight), or a
// partition failed (the test fails). Under testing/synctest idle releases
// of the gate happen in fake time.
func (t *Tester) WaitIdle() {
	t.tb.Helper()
	for {
		ch := t.changed.wait()
		t.errMu.Lock()
		errs := slices.Clone(t.errs)
		t.errMu.Unlock()
		if len(errs) > 0 {
			t.tb.Fatalf("chaintest: chain failed: %v", errors.Join(errs...))
		}
		if t.idle() {
			return
		}
		<-ch
	}
}

// Measure is a benchmark's timed part: it starts partition 0, whose log
// holds b.N records, waits until the chain is idle, reports allocs/record
// (allocs/op is truncated to an integer; this is the exact rate) and stops
// the chain.
func (t *Tester) Measure(b *testing.B) {
	b.Helper()
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	t.Start(0)
	t.WaitIdle()
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/record")
	if err := t.Stop(); err != nil {
		b.Fatal(err)
	}
}

// WaitCommitted blocks until partition p's last commit is at or after
// offset, or a partition failed (the test fails).
func (t *Tester) WaitCommitted(p int32, offset int64) {
	t.tb.Helper()
	for {
		ch := t.changed.wait()
		t.errMu.Lock()
		errs := slices.Clone(t.errs)
		t.errMu.Unlock()
		if len(errs) > 0 {
			t.tb.Fatalf("chaintest: chain failed: %v", errors.Join(errs...))
		}
		if cs := t.Commits(p); len(cs) > 0 && cs[len(cs)-1].Offset >= offset {
			return
		}
		<-ch
	}
}

func (t *Tester) idle() bool {
	if t.ch == nil {
		return true
	}
	byPart := map[int32]chain.PartitionStats{}
	for _, ps := range t.ch.Stats() {
		byPart[ps.Partition] = ps
	}
	for _, p := range t.running {
		l := t.Log(p)
		end := l.RecordsEnd()
		ps, ok := byPart[p]
		if !ok || len(ps.Stages) == 0 {
			if end > l.Start() {
				return false // not started yet, or not ready
			}
			continue
		}
		for _, s := range ps.Stages {
			if s.Position < end || s.InFlight > 0 {
				return false
			}
		}
	}
	return true
}

// Outputs returns the messages produced to topic so far, in acknowledgement
// order ("output" is the default output topic, "dlq" the dead-letter topic).
func (t *Tester) Outputs(topic string) []chain.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []chain.Message
	for _, m := range t.mu.outputs {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// errInjectedCommit is the error of a commit FailCommits fails.
var errInjectedCommit = errors.New("chaintest: injected commit failure")

// FailCommits makes the next n commits fail (as a commit refused by the
// group coordinator would): the chain has persisted the checkpoint locally,
// and Kafka does not have it.
func (t *Tester) FailCommits(n int) {
	t.mu.Lock()
	t.mu.failCommits = n
	t.mu.Unlock()
}

// ResetOffset commits offset for partition p with empty metadata, as
// kafka-consumer-groups --reset-offsets does (use it while the chain is
// stopped): the next Start resumes every stage there.
func (t *Tester) ResetOffset(p int32, offset int64) {
	t.mu.Lock()
	t.mu.commits[p] = append(t.mu.commits[p], Commit{Offset: offset})
	t.mu.Unlock()
}

// SetCommit records c as partition p's last commit (use it while the chain
// is stopped): the next Start resumes from it, as from a commit an earlier
// run made — e.g. metadata from commit.EncodeState with stages at
// different positions.
func (t *Tester) SetCommit(p int32, c Commit) {
	t.mu.Lock()
	t.mu.commits[p] = append(t.mu.commits[p], c)
	t.mu.Unlock()
}

// Commits returns the commits made for partition p, oldest first.
func (t *Tester) Commits(p int32) []Commit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.mu.commits[p])
}

// Stats is the running chain's Stats (nil when stopped).
func (t *Tester) Stats() []chain.PartitionStats {
	if t.ch == nil {
		return nil
	}
	return t.ch.Stats()
}

type producer struct{ t *Tester }

func (p producer) Produce(_ context.Context, msgs []chain.Message, done func(error)) {
	t := p.t
	cp := make([]chain.Message, len(msgs))
	copy(cp, msgs)
	t.mu.Lock()
	if limit := t.mu.maxSize; limit > 0 {
		for i := range cp {
			if n := messageSize(&cp[i]); n > limit {
				t.mu.Unlock()
				done(fmt.Errorf("chaintest: message to %s: %w: %d bytes > %d", cp[i].Topic, chain.ErrMessageTooLarge, n, limit))
				return
			}
		}
	}
	mode := t.mu.acks
	if mode == AckHold {
		t.mu.held = append(t.mu.held, func(err error) {
			if err == nil {
				t.mu.Lock()
				t.keepLocked(cp)
				t.mu.Unlock()
			}
			done(err)
		})
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	ack := func() {
		t.mu.Lock()
		t.keepLocked(cp)
		t.mu.Unlock()
		done(nil)
	}
	if mode == AckAsync {
		go ack()
		return
	}
	ack()
}

func messageSize(m *chain.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func (t *Tester) keepLocked(msgs []chain.Message) {
	if !t.mu.discard {
		t.mu.outputs = append(t.mu.outputs, msgs...)
		return
	}
	if t.mu.counts == nil {
		t.mu.counts = map[string]int{}
	}
	for _, m := range msgs {
		t.mu.counts[m.Topic]++
	}
}

type committer struct {
	t *Tester
	p int32
}

func (c committer) Commit(ctx context.Context, offset int64, md string) error {
	c.t.mu.Lock()
	if c.t.mu.failCommits > 0 {
		c.t.mu.failCommits--
		c.t.mu.Unlock()
		return errInjectedCommit
	}
	prev := c.t.mu.commits[c.p]
	if n := len(prev); n > 0 && offset < prev[n-1].Offset {
		c.t.mu.Unlock()
		return fmt.Errorf("chaintest: commit %d below previous %d", offset, prev[n-1].Offset)
	}
	c.t.mu.commits[c.p] = append(prev, Commit{offset, md})
	c.t.mu.Unlock()
	c.t.changed.notify()
	return nil
}

type observer struct{ t *Tester }

func (o observer) Begin(chain.BeginInfo) {}

func (o observer) Advanced(string, int32, int, int64, time.Time) { o.t.changed.notify() }

func (o observer) Committed(string, int32, int64, string) {}

// signal is a broadcast: wait returns a channel closed by the next notify.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
