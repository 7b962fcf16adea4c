package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/kafka"
)

// waitTimeout bounds every wait for an event; tests never sleep.
const waitTimeout = 60 * time.Second

// Test records have values "type|eventTimeSeconds", as in the chain's own
// tests.
var base = testutil.Base

var stageTypes = []string{"click", "install", "purchase"}

var decoder = testutil.Decoder

// workload is a test input: record i goes to partition i % partitions (so
// at offset i / partitions of a fresh topic) with the value "type|seconds";
// event types are random, event times mostly increasing per partition.
type workload struct {
	partitions int32
	msgs       []*sarama.ProducerMessage
	types      map[int32][]string // by partition and offset
}

func newWorkload(partitions int32, n int, seed uint64) *workload {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := &workload{partitions: partitions, msgs: make([]*sarama.ProducerMessage, n), types: map[int32][]string{}}
	for i := range w.msgs {
		p := int32(i) % partitions
		typ := stageTypes[rng.IntN(3)]
		sec := max(i/int(4*partitions)-rng.IntN(3), 0)
		w.types[p] = append(w.types[p], typ)
		w.msgs[i] = &sarama.ProducerMessage{
			Partition: p,
			Key:       sarama.StringEncoder("u" + strconv.Itoa(rng.IntN(997))),
			Value:     sarama.StringEncoder(fmt.Sprintf("%s|%d", typ, sec)),
		}
	}
	return w
}

// produce writes records [from, to) of the workload (in order, acks=all)
// and checks each landed at its planned offset.
func (w *workload) produce(t *testing.T, b *testbroker.Broker, topic string, from, to int) {
	t.Helper()
	cfg := b.Config()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	batch := w.msgs[from:to]
	for _, m := range batch {
		m.Topic = topic
	}
	require.NoError(t, p.SendMessages(batch))
	for i, m := range batch {
		require.Equal(t, int64(from+i)/int64(w.partitions), m.Offset, "record %d", from+i)
	}
}

// produceWorkload writes a whole workload of n records.
func produceWorkload(t *testing.T, b *testbroker.Broker, topic string, partitions int32, n int, seed uint64) map[int32][]string {
	t.Helper()
	w := newWorkload(partitions, n, seed)
	w.produce(t, b, topic, 0, n)
	return w.types
}

// ledger records, across every chain of a test (every group member and
// every restart), how often each stage began and processed each
// (partition, offset), every stage's last reported position, and the
// group's commits; it notifies when every partition's commit reached its
// end. Lock-free on the hot path.
type ledger struct {
	t       *testing.T
	ends    map[int32]int64
	nstages int

	begun     map[int32][]atomic.Int32 // [stage*end + offset]
	processed map[int32][]atomic.Int32
	total     atomic.Int64 // stage-0 begins

	mu        sync.Mutex
	positions map[int32][]int64 // last Advanced next per stage
	commits   map[int32]int64
	errs      []string
	thresh    []threshold
	done      chan struct{}
}

type threshold struct {
	n  int64
	ch chan struct{}
}

func newLedger(t *testing.T, types map[int32][]string, stages int) *ledger {
	l := &ledger{
		t: t, ends: map[int32]int64{}, nstages: stages,
		begun: map[int32][]atomic.Int32{}, processed: map[int32][]atomic.Int32{},
		positions: map[int32][]int64{}, commits: map[int32]int64{},
		done: make(chan struct{}),
	}
	for p, ts := range types {
		end := int64(len(ts))
		l.ends[p] = end
		l.begun[p] = make([]atomic.Int32, int64(stages)*end)
		l.processed[p] = make([]atomic.Int32, int64(stages)*end)
		l.positions[p] = make([]int64, stages)
		l.commits[p] = -1
	}
	return l
}

func (l *ledger) total64() int64 {
	var n int64
	for _, e := range l.ends {
		n += e
	}
	return n
}

// after returns a channel closed once stage 0 has begun n records in total.
func (l *ledger) after(n int64) <-chan struct{} {
	ch := make(chan struct{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total.Load() >= n {
		close(ch)
		return ch
	}
	l.thresh = append(l.thresh, threshold{n, ch})
	return ch
}

func (l *ledger) errorf(format string, args ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// observer returns a chain.Observer feeding the ledger and m.
func (l *ledger) observer(m *member) chain.Observer { return &ledgerObserver{l, m} }

type ledgerObserver struct {
	l *ledger
	m *member
}

func (o *ledgerObserver) Begin(b chain.BeginInfo) {
	l := o.l
	end := l.ends[b.Partition]
	if b.Offset < 0 || b.Offset >= end {
		l.errorf("stage %d began %d/%d beyond the end %d", b.Stage, b.Partition, b.Offset, end)
		return
	}
	l.begun[b.Partition][int64(b.Stage)*end+b.Offset].Add(1)
	if b.Stage > 0 && b.LeaderNext <= b.Offset {
		l.errorf("I1: stage %d began %d/%d with its leader at %d", b.Stage, b.Partition, b.Offset, b.LeaderNext)
	}
	if b.Stage != 0 {
		return
	}
	o.m.begun.Add(1)
	n := l.total.Add(1)
	l.mu.Lock()
	kept := l.thresh[:0]
	for _, th := range l.thresh {
		if n >= th.n {
			close(th.ch)
		} else {
			kept = append(kept, th)
		}
	}
	l.thresh = kept
	l.mu.Unlock()
}

func (o *ledgerObserver) Advanced(_ string, p int32, stage int, next int64, _ time.Time) {
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	if pos := o.l.positions[p]; next > pos[stage] {
		pos[stage] = next
	}
}

func (o *ledgerObserver) Committed(_ string, p int32, off int64, _ string) {
	l := o.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if off > l.commits[p] {
		l.commits[p] = off
	}
	for q, end := range l.ends {
		if l.commits[q] < end {
			return
		}
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
}

// waitDone waits until every partition's commit reached its end; on a
// timeout it reports each unfinished partition's commit and stage
// positions, which say which stage stalled.
func (l *ledger) waitDone(t *testing.T, what string) {
	t.Helper()
	select {
	case <-l.done:
		return
	case <-time.After(waitTimeout):
	}
	l.mu.Lock()
	for p, end := range l.ends {
		if l.commits[p] < end {
			t.Logf("partition %d: end %d, committed %d, stage positions %v", p, end, l.commits[p], l.positions[p])
		}
	}
	l.mu.Unlock()
	t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
}

// processor records a stage's call for (partition, offset).
func (l *ledger) processor(stage int, emit func(pc *chain.Context, ev *chain.Event)) chain.Processor {
	return chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, ev *chain.Event) error {
		end := l.ends[ev.Partition]
		l.processed[ev.Partition][int64(stage)*end+ev.Offset].Add(1)
		if emit != nil {
			emit(pc, ev)
		}
		return nil
	})
}

// stages builds the click → install → purchase chain over the ledger.
func (l *ledger) stages(emit func(pc *chain.Context, ev *chain.Event)) []chain.Stage {
	out := make([]chain.Stage, len(stageTypes))
	for i, typ := range stageTypes {
		out[i] = chain.Stage{
			Name:      typ,
			Filter:    func(ev *chain.Event) bool { return ev.Type == typ },
			Processor: l.processor(i, emit),
		}
	}
	return out
}

// checkExactlyOnce asserts that every stage began every offset of every
// partition exactly once, processed exactly the records of its type once,
// and that no invariant check failed.
func (l *ledger) checkExactlyOnce(types map[int32][]string) {
	t := l.t
	t.Helper()
	l.mu.Lock()
	errs := l.errs
	l.mu.Unlock()
	require.Empty(t, errs, "observer invariant violations")
	for p, ts := range types {
		end := l.ends[p]
		for s := range l.nstages {
			for o := range end {
				b := l.begun[p][int64(s)*end+o].Load()
				require.EqualValues(t, 1, b, "stage %d began %d/%d %d times", s, p, o, b)
				want := int32(0)
				if ts[o] == stageTypes[s] {
					want = 1
				}
				got := l.processed[p][int64(s)*end+o].Load()
				require.Equal(t, want, got, "stage %d processed %d/%d (type %s) %d times", s, p, o, ts[o], got)
			}
		}
	}
}

// minPosition is the smallest last reported position of p's stages.
func (l *ledger) minPosition(p int32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return minOf(l.positions[p])
}

func (l *ledger) stagePositions(p int32) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.positions[p]...)
}

func minOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	testutil.Recv(t, ch, waitTimeout, what)
}

// member is one running kafka.Run.
type member struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	begun  atomic.Int64 // this member's stage-0 begins
	// active is closed when the member starts its first partition
	// (Hooks.Assigned).
	active     chan struct{}
	activeOnce sync.Once
	// released is closed when the member's first partition has stopped
	// (Hooks.Released).
	released     chan struct{}
	releasedOnce sync.Once
}

func (m *member) activate() { m.activeOnce.Do(func() { close(m.active) }) }

func (m *member) release() { m.releasedOnce.Do(func() { close(m.released) }) }

// runMember starts kafka.Run with a new chain built by newChain.
func runMember(t *testing.T, cfg kafka.Config, newChain func(m *member) *chain.Chain) *member {
	t.Helper()
	m := &member{done: make(chan struct{}), active: make(chan struct{}), released: make(chan struct{})}
	ch := newChain(m)
	cfg.Hooks.Assigned = func(string, int32, int64) { m.activate() }
	cfg.Hooks.Released = func(string, int32, error) { m.release() }
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		m.err = kafka.Run(ctx, ch, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		<-m.done
	})
	return m
}

// stop cancels the member and returns Run's error and how long it took.
func (m *member) stop(t *testing.T) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	m.cancel()
	recv(t, m.done, "Run to return")
	return m.err, time.Since(start)
}

func groupConfig(b *testbroker.Broker, topic, group string, t *testing.T) kafka.Config {
	return kafka.Config{
		Brokers:     b.Addrs(),
		Topic:       topic,
		Group:       group,
		Sarama:      b.Config(),
		Logger:      testLogger(t),
		MaxWaitTime: 50 * time.Millisecond,
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: testLogLevel}))
}

// groupOffsets reads the group's committed offsets and metadata.
func groupOffsets(t *testing.T, b *testbroker.Broker, group, topic string, partitions []int32) map[int32]*sarama.OffsetFetchResponseBlock {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	require.NoError(t, err)
	out := map[int32]*sarama.OffsetFetchResponseBlock{}
	for _, p := range partitions {
		blk := resp.GetBlock(topic, p)
		require.NotNil(t, blk, "partition %d", p)
		require.Equal(t, sarama.ErrNoError, blk.Err)
		out[p] = blk
	}
	return out
}

func partitionsOf(types map[int32][]string) []int32 {
	ps := make([]int32, 0, len(types))
	for p := range types {
		ps = append(ps, p)
	}
	return ps
}

// chainOptions are the test chains' options: short intervals so commits and
// idle releases come fast.
func chainOptions(t *testing.T, obs chain.Observer, extra ...chain.Option) []chain.Option {
	return append([]chain.Option{
		chain.WithLogger(testLogger(t)),
		chain.WithObserver(obs),
		chain.WithCommitInterval(50 * time.Millisecond),
		chain.WithIdleTimeout(20 * time.Millisecond),
		chain.WithShutdownTimeout(10 * time.Second),
	}, extra...)
}

var testLogLevel = func() slog.Level {
	if os.Getenv("KAFKA_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}()

// topicWithMax creates a topic whose records may be up to maxBytes.
func topicWithMax(t *testing.T, b *testbroker.Broker, maxBytes int) string {
	t.Helper()
	name := testbroker.Name(t, "big")
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer func() { require.NoError(t, admin.Close()) }()
	td := kadmin.NewTopic(1)
	v := strconv.Itoa(maxBytes)
	td.ConfigEntries["max.message.bytes"] = &v
	require.NoError(t, admin.CreateTopic(name, td, false))
	if b.Real() {
		t.Cleanup(func() { _ = admin.DeleteTopic(name) })
	}
	require.NoError(t, kadmin.AwaitLeaders(b.Addrs(), b.Config(), name, 1, 30*time.Second))
	return name
}

type commitWaiter struct {
	mu    sync.Mutex
	want  int64
	ch    chan struct{}
	fired bool
}

func (w *commitWaiter) Begin(chain.BeginInfo) {}

func (w *commitWaiter) Advanced(string, int32, int, int64, time.Time) {}

func (w *commitWaiter) Committed(_ string, _ int32, off int64, _ string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off >= w.want && !w.fired {
		w.fired = true
		close(w.ch)
	}
}

// refusedBatchDeadLetters are two dead letters to dlq, a 200 kB one (above
// the topic's max.message.bytes of 100 kB, below the chain's dead-letter
// cap) and a small one, and the producer configuration that puts them in
// one batch: Flush.Messages = 2 (Flush.Frequency sends a message left
// alone). Both brokers refuse the batch as a whole: kfake and Kafka weigh
// the batch against max.message.bytes.
func refusedBatchDeadLetters(t *testing.T, b *testbroker.Broker) (dlq string, big, small chain.Message, cfg *sarama.Config) {
	t.Helper()
	dlq = topicWithMax(t, b, 100_000)
	reason := errors.New("undecodable")
	big = chain.DeadLetter(dlq, "click", &chain.Record{Topic: "input", Offset: 0, Value: bytes.Repeat([]byte("x"), 200_000)}, reason, chain.DefaultMaxDeadLetterBytes)
	small = chain.DeadLetter(dlq, "click", &chain.Record{Topic: "input", Offset: 1, Value: []byte("small")}, reason, chain.DefaultMaxDeadLetterBytes)
	cfg = b.Config()
	cfg.Producer.Flush.Messages = 2
	cfg.Producer.Flush.Frequency = 200 * time.Millisecond
	return dlq, big, small, cfg
}

// deadLetters reads dlq's records by the offset they dead-letter.
func deadLetters(t *testing.T, b *testbroker.Broker, dlq string, readCommitted bool) map[string][]*sarama.ConsumerMessage {
	t.Helper()
	out := map[string][]*sarama.ConsumerMessage{}
	for _, m := range b.ReadAll(t, dlq, readCommitted)[0] {
		for _, h := range m.Headers {
			if string(h.Key) == chain.HeaderDLQOffset {
				out[string(h.Value)] = append(out[string(h.Value)], m)
			}
		}
	}
	return out
}

func truncated(m *sarama.ConsumerMessage) bool {
	for _, h := range m.Headers {
		if string(h.Key) == chain.HeaderDLQTruncated {
			return true
		}
	}
	return false
}
