package e2e_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

var errCrashed = errors.New("simulated crash: nothing is persisted any more")

// freezable wraps a store so a test can "kill" the process in place: once
// frozen, no checkpoint reaches the disk (and so no commit reaches Kafka,
// which the chain makes only after a successful checkpoint). The engine
// notices at its next checkpoint and stops; nothing it did after the freeze
// survives, exactly as after a SIGKILL at the freeze.
type freezable struct {
	chain.Store
	mu     sync.Mutex
	frozen bool
}

func (f *freezable) freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

func (f *freezable) OpenPartition(topic string, p int32, stages []string) (chain.PartitionStore, error) {
	ps, err := f.Store.OpenPartition(topic, p, stages)
	if err != nil {
		return nil, err
	}
	return &freezablePartition{PartitionStore: ps, f: f}, nil
}

type freezablePartition struct {
	chain.PartitionStore
	f *freezable
}

func (p *freezablePartition) Checkpoint(cps []commit.Checkpoint, evict time.Time) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.f.frozen {
		return errCrashed
	}
	return p.PartitionStore.Checkpoint(cps, evict)
}

// progress counts, per partition, the last stage's position, and signals
// when the total reaches a target.
type progress struct {
	mu     sync.Mutex
	last   map[int32]int64
	sum    int64
	target int64
	hit    chan struct{}
}

func newProgress(target int64) *progress {
	return &progress{last: map[int32]int64{}, target: target, hit: make(chan struct{})}
}

func (p *progress) Begin(chain.BeginInfo) {}

func (p *progress) Advanced(_ string, part int32, stage int, next int64, _ time.Time) {
	if stage != 2 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if next > p.last[part] {
		p.last[part] = next
	}
	var total int64
	for _, n := range p.last {
		total += n
	}
	p.sum = total
	if total >= p.target && p.hit != nil {
		close(p.hit)
		p.hit = nil
	}
}

// total is the last stage's positions added up.
func (p *progress) total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sum
}

func (p *progress) Committed(string, int32, int64, string) {}

type env struct {
	b            *testbroker.Broker
	in, out, dlq string
	group, dir   string
	cfg          attribution.Config
	parts        [][]chain.Record
	model        *reference.Expectation // of parts
	total        int64
	// args are extra `differential run` flags (env.start).
	args []string
}

// newEnv makes the topics (input and output with 4 partitions, dead
// letters with 1), a group name and a state directory, and writes a
// generated workload of records over users to the input.
func newEnv(t *testing.T, group string, records, users int, seed uint64) *env {
	const partitions = 4
	b := testbroker.New(t)
	e := &env{b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
		group: testbroker.Name(t, group), dir: t.TempDir()}
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = records, partitions, users, seed
	wc.MaxRecordBytes = 16 << 10
	e.cfg = attribution.DefaultConfig()
	e.cfg.MaxRecordBytes = wc.MaxRecordBytes
	e.cfg.IdleTimeout = idleTimeoutD // the engine's, for the model's horizons
	e.produce(t, wc)
	return e
}

// stuckAfter is how long runUntil lets the last stage's positions stand
// still before it fails: the wait is on progress, not on a total time,
// since a round under -race on a loaded 2-core machine can take minutes.
const stuckAfter = 3 * time.Minute

// idleTimeout is the crash tests' idle release: long enough that a fetcher
// stalled by a loaded machine (GC, two cores shared with brokers and other
// tests) never releases a follower mid-stream past a leader record not yet
// fetched — the idle release trades completeness for progress (DESIGN.md "Mechanisms"),
// and a 200 ms one made these tests' results timing-dependent in CI (an
// install attributed to an older click) — and short enough that the input's
// tail, released only by it, costs the run a few seconds.
const (
	idleTimeout  = "5s"
	idleTimeoutD = 5 * time.Second
)

// runUntil runs the attribution chain (Pebble state in e.dir) until the last
// stage's positions add up to target, then crashes it (crash=true) or stops
// it cleanly. Whatever happens (a failed wait included), the run has
// returned and the store and producer are closed before the test's
// temporary directory is removed: a Pebble store still running in a
// removed directory panics.
func (e *env) runUntil(t *testing.T, target int64, crash bool) {
	t.Helper()
	db, err := store.OpenPebble(e.dir)
	require.NoError(t, err)
	fs := &freezable{Store: db}
	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: e.b.Addrs(), Sarama: e.b.Config()})
	if err != nil {
		_ = db.Close()
		require.NoError(t, err)
	}
	pr := newProgress(target)
	ch, err := attribution.NewChain(e.cfg,
		chain.WithStore(fs), chain.WithProducer(prod), chain.WithOutputTopic(e.out), chain.WithDLQTopic(e.dlq),
		chain.WithCommitInterval(50*time.Millisecond), chain.WithIdleTimeout(idleTimeoutD), chain.WithObserver(pr))
	if err != nil {
		_ = prod.Close()
		_ = db.Close()
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafka.Run(ctx, ch, kafka.Config{Brokers: e.b.Addrs(), Topic: e.in, Group: e.group, Sarama: e.b.Config()})
	}()
	// Registered after t.TempDir's cleanup, so it runs before it (cleanups
	// run last first); on the normal path it finds everything stopped.
	var runErr error
	stopped, closed := false, false
	stop := func() {
		cancel()
		if !stopped {
			runErr, stopped = <-done, true
		}
		if !closed {
			closed = true
			require.NoError(t, prod.Close())
			require.NoError(t, db.Close())
		}
	}
	t.Cleanup(stop)

	hit := pr.hit
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, moved := pr.total(), time.Now()
	for reached := false; !reached; {
		select {
		case <-hit:
			reached = true
		case err := <-done:
			stopped = true
			t.Fatalf("run ended before reaching %d: %v", target, err)
		case <-tick.C:
			if n := pr.total(); n != last {
				last, moved = n, time.Now()
			} else if time.Since(moved) > stuckAfter {
				t.Fatalf("no progress towards %d for %v (at %d)", target, stuckAfter, n)
			}
		}
	}
	if crash {
		fs.freeze()
	}
	stop()
	if !crash {
		require.NoError(t, runErr)
	}
}

// TestHardCrashRestartNoLossNoDoubleEffect: >= 100,000 records, the engine
// killed in place three times at random points (no drain, no final
// checkpoint or commit) and restarted on the same Pebble directory, then
// run to the end. The distinct outputs equal the reference model's (nothing
// lost), every repeated output is byte-identical (re-emission, never a
// different answer: no state effect applied twice, DESIGN I4/I6), the dead
// letters are exactly the invalid records, the committed offsets reach the
// ends, and the Pebble state equals the model's final state.
func TestHardCrashRestartNoLossNoDoubleEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash", 100_000, 3000, 42)

	rng := rand.New(rand.NewPCG(7, 7))
	done := int64(0)
	for round := range 3 {
		done += e.total / 10 * int64(1+rng.IntN(2))
		t.Logf("round %d: crash after the last stage passes %d records in total", round, done)
		e.runUntil(t, done, true)
	}
	e.runUntil(t, e.total, false)

	e.verify(t)
}

// verify checks the outputs, dead letters, committed offsets and Pebble state
// of a finished run against the reference model. Crashes re-emit: every
// output and dead letter at least once, each repeat byte-identical.
func (e *env) verify(t *testing.T) {
	t.Helper()
	e.verifyWith(t, false, reference.IdenticalDuplicates)
}

// verifyWith is verify reading the topics read_committed or not, with the
// repeats dups allows.
func (e *env) verifyWith(t *testing.T, readCommitted bool, dups reference.Duplicates) {
	t.Helper()
	b := e.b
	r := e.model.Check(reference.FromKafka(b.ReadAll(t, e.out, readCommitted)), reference.FromKafka(b.ReadAll(t, e.dlq, readCommitted)),
		reference.Options{Duplicates: dups})
	require.True(t, r.OK(), r.Summary())
	o := r.Outputs()
	t.Logf("outputs: %d distinct, %d re-emitted after crashes; dead letters: %d, %d re-emitted",
		o.Distinct(), o.IdenticalDuplicates, r.DeadLetters.Distinct(), r.DeadLetters.IdenticalDuplicates)
	// The Pebble state equals the model's final state.
	db, err := store.OpenPebble(e.dir)
	require.NoError(t, err)
	defer db.Close()
	for p, ref := range e.model.Results() {
		entries, err := db.Entries(e.in, int32(p))
		require.NoError(t, err)
		snap, err := attribution.SnapshotOf(entries)
		require.NoError(t, err)
		require.Equal(t, ref.Final.String(), reference.Usable(snap, ref.StreamTime, e.cfg).String(), "partition %d final state", p)
	}
	// Committed offsets reach the end of every partition.
	adm, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	require.NoError(t, err)
	defer adm.Close()
	off, err := adm.ListConsumerGroupOffsets(e.group, map[string][]int32{e.in: partitionList(len(e.parts))})
	require.NoError(t, err)
	for p := range e.parts {
		blk := off.GetBlock(e.in, int32(p))
		require.NotNil(t, blk)
		last := e.parts[p][len(e.parts[p])-1].Offset
		require.Equal(t, last+1, blk.Offset, "partition %d committed offset", p)
	}
}

func partitionList(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// produce writes a generated workload to the fresh topic e.in, each record
// at its planned partition and offset, so the partitions' logs are
// workload.Split of the records (e.parts), for the reference model.
func (e *env) produce(t *testing.T, wc workload.Config) {
	t.Helper()
	wc.Topic = e.in
	recs := workload.Generate(wc)
	_, err := workload.Write(context.Background(), workload.WriterConfig{Brokers: e.b.Addrs(), Sarama: e.b.Config(), Topic: e.in, Exact: true}, recs)
	require.NoError(t, err)
	e.parts = workload.Split(recs, wc.Partitions)
	e.total = int64(len(recs))
	e.model = reference.Expect(e.parts, e.cfg)
}

// expectedOutputs is how many distinct outputs the reference model gives.
func (e *env) expectedOutputs() int {
	n := 0
	for _, ref := range e.model.Results() {
		n += len(ref.Installs) + len(ref.Purchases)
	}
	return n
}
