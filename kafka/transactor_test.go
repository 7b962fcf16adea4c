package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainmetrics"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testbroker"
	wl "github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

// eosRun is one exactly-once member over a generated attribution input.
type eosRun struct {
	b             *testbroker.Broker
	reg           metrics.Registry // the Transactor's and the chain's metrics
	in, out, dlq  string
	group, txnID  string
	cfg           attribution.Config
	parts         [][]chain.Record
	ends          map[int32]int64
	tx            *kafka.Transactor
	progress      *endWatcher
	cancel        context.CancelFunc
	ran           chan error
	partitions    int
	committedOnce chan struct{}
}

func startEOS(t *testing.T, records int) *eosRun {
	t.Helper()
	const partitions = 4
	b := testbroker.New(t)
	r := &eosRun{b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
		group: testbroker.Name(t, "eos"), txnID: testbroker.Name(t, "txn"), partitions: partitions,
		ends: map[int32]int64{}, ran: make(chan error, 1), reg: metrics.NewRegistry()}
	wc := wl.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = records, partitions, 300, 11
	wc.MaxRecordBytes = 16 << 10
	r.cfg = attribution.DefaultConfig()
	r.cfg.MaxRecordBytes = wc.MaxRecordBytes
	r.cfg.IdleTimeout = 100 * time.Millisecond // the engine's, for the model's horizons
	recs := wl.Generate(wc)
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, rec := range recs {
		msgs[i] = &sarama.ProducerMessage{Key: sarama.ByteEncoder(rec.Key), Value: sarama.ByteEncoder(rec.Value), Timestamp: rec.Timestamp}
	}
	b.Produce(t, r.in, msgs...)
	r.parts = make([][]chain.Record, partitions)
	for _, m := range msgs {
		r.parts[m.Partition] = append(r.parts[m.Partition], chain.Record{Topic: r.in, Partition: m.Partition, Offset: m.Offset,
			Key: []byte(m.Key.(sarama.ByteEncoder)), Value: []byte(m.Value.(sarama.ByteEncoder)), Timestamp: m.Timestamp})
		r.ends[m.Partition] = m.Offset + 1
	}

	db, err := store.OpenPebble(t.TempDir())
	require.NoError(t, err)
	cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{Brokers: b.Addrs(), InputTopic: r.in, Group: r.group, Sarama: b.Config()})
	require.NoError(t, err)
	if b.Real() {
		t.Cleanup(func() { deleteTopic(t, b, cl.Topic()) })
	}
	r.tx, err = kafka.NewTransactor(kafka.TransactorConfig{Brokers: b.Addrs(), TransactionalID: r.txnID, Timeout: 5 * time.Second,
		Changelog: cl, Sarama: b.Config(), Logger: testLogger(t), Registry: r.reg})
	require.NoError(t, err)
	r.progress = &endWatcher{ends: map[int32]int64{}, done: make(chan struct{})}
	for p, e := range r.ends {
		r.progress.ends[p] = e
	}
	first := &firstCommit{ch: make(chan struct{})}
	r.committedOnce = first.ch
	ch, err := attribution.NewChainWith(r.cfg, attribution.Wiring{}, chain.WithStore(db), chain.WithChangelog(cl), chain.WithExactlyOnce(r.tx),
		chain.WithOutputTopic(r.out), chain.WithDLQTopic(r.dlq), chain.WithObserver(r.progress), chain.WithObserver(first), chainmetrics.Option(r.reg),
		chain.WithCommitInterval(100*time.Millisecond), chain.WithIdleTimeout(100*time.Millisecond),
		chain.WithShutdownTimeout(10*time.Second), chain.WithLogger(testLogger(t)))
	require.NoError(t, err)
	require.True(t, ch.ExactlyOnce())
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.ran <- kafka.Run(ctx, ch, kafka.Config{Brokers: b.Addrs(), Topic: r.in, Group: r.group, Sarama: b.Config(), Logger: testLogger(t)})
	}()
	t.Cleanup(func() {
		cancel()
		<-r.ran
		_ = r.tx.Close()
		_ = cl.Close()
		_ = db.Close()
	})
	return r
}

// firstCommit closes ch at the first commit.
type firstCommit struct {
	ch   chan struct{}
	once bool
}

func (f *firstCommit) Begin(chain.BeginInfo)                         {}
func (f *firstCommit) Advanced(string, int32, int, int64, time.Time) {}
func (f *firstCommit) Committed(string, int32, int64, string) {
	if !f.once {
		f.once = true
		close(f.ch)
	}
}

// finish waits for every partition's commit to reach its end, stops the
// member and checks what a read_committed reader sees: every output and
// dead letter of the model exactly once, nothing else, each user's in
// input order (the attribution chain's key-scoped gate orders per key).
func (r *eosRun) finish(t *testing.T) *reference.Report {
	t.Helper()
	select {
	case <-r.progress.done:
	case err := <-r.ran:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("commits did not reach the ends within 3 minutes")
	}
	r.cancel()
	require.NoError(t, <-r.ran)
	r.ran <- nil // for the cleanup
	r.b.WaitStable(t, r.out)
	r.b.WaitStable(t, r.dlq)
	rep := reference.Check(r.parts, r.cfg, reference.FromKafka(r.b.ReadAll(t, r.out, true)), reference.FromKafka(r.b.ReadAll(t, r.dlq, true)),
		reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	require.True(t, rep.OK(), rep.Summary())
	return rep
}

// An exactly-once member's outputs, dead letters, changelog and offsets:
// read_committed, every output and dead letter once, as the model says.
func TestExactlyOnceRunMatchesModel(t *testing.T) {
	r := startEOS(t, 6000)
	rep := r.finish(t)
	t.Logf("outputs: %d, dead letters: %d", rep.Outputs().Distinct(), rep.DeadLetters.Distinct())
}

// A newer producer with the same transactional id fences the member's
// producer in the middle of the run: the open transaction is aborted (its
// outputs stay in the log, invisible to read_committed readers), the member
// starts a new producer session and restarts its partitions from the last
// committed cycle, and the result is still every output exactly once.
//
// Not under the race detector: sarama v1.61.1's transaction manager writes
// lastError under its status lock (transitionTo, when a produce fails on the
// fenced producer) and reads it under another lock (publishTxnPartitions),
// a race inside sarama that -race reports here. The test runs without -race
// in CI's real-broker pass and in a plain `go test ./...` (embedded broker).
func TestFencedTransactorRecovers(t *testing.T) {
	if raceEnabled {
		t.Skip("sarama v1.61.1 races on transactionManager.lastError when a transactional producer is fenced (see the comment)")
	}
	r := startEOS(t, 6000)
	select {
	case <-r.committedOnce:
	case <-time.After(time.Minute):
		t.Fatal("no commit within a minute")
	}
	sc := r.b.Config()
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Transaction.ID = r.txnID
	sc.Version = sarama.V2_5_0_0
	zombie, err := sarama.NewAsyncProducer(r.b.Addrs(), sc) // InitProducerId: fences the member's producer
	require.NoError(t, err)
	require.NoError(t, zombie.Close())
	r.finish(t)
	// The aborted transaction's outputs are in the log: a read_uncommitted
	// reader would have seen some twice.
	all := reference.Check(r.parts, r.cfg, reference.FromKafka(r.b.ReadAll(t, r.out, false)), nil,
		reference.Options{Duplicates: reference.IdenticalDuplicates, Order: reference.AnyOrder})
	t.Logf("read_uncommitted: %d repeated outputs (aborted transactions)", all.Outputs().IdenticalDuplicates)
	count := func(name string) int64 {
		c, ok := r.reg.Get(name).(metrics.Counter)
		require.True(t, ok, "%s registered", name)
		return c.Count()
	}
	// The series exist; how many sessions were replaced and transactions
	// aborted depends on whether the member had a transaction open when it
	// was fenced and how the fencing surfaced (a fenced error, or a fatal
	// transaction state), so only their registration is checked here.
	count(kafka.FencedMetric)
	for _, c := range chain.TxnAbortCauses {
		count(chainmetrics.TxnAbortedPrefix + string(c))
	}
	require.Positive(t, count(chainmetrics.TxnCommitted))
}

// TestExactlyOnceStopUnderFaultsFinishesInsideTheRebalanceTimeout: an
// exactly-once member is stopped while every commit of a transaction fails
// (the coordinator refuses it before CommitTxn: each cycle is resolved as
// not committed, aborted and rewound, with backoff). The stop must still
// end inside the group's rebalance timeout (sarama's default, 60 s): a
// revoked member that outlasts it is expelled mid-drain and its partitions'
// next owner races it. Runs on kfake and on a real broker.
func TestExactlyOnceStopUnderFaultsFinishesInsideTheRebalanceTimeout(t *testing.T) {
	r := startEOS(t, 6000)
	select {
	case <-r.committedOnce:
	case <-time.After(time.Minute):
		t.Fatal("no commit within a minute")
	}
	var refused atomic.Int32
	failing := make(chan struct{})
	kafka.SetCommitFaults(r.tx, func() error {
		if refused.Add(1) == 3 {
			close(failing)
		}
		return errors.New("test: the transaction coordinator refuses the commit")
	}, nil)
	// Let a few cycles fail before the stop comes.
	select {
	case <-failing:
	case err := <-r.ran:
		t.Fatalf("Run ended under the commit faults: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("cycles did not fail")
	}
	start := time.Now()
	r.cancel()
	var err error
	select {
	case err = <-r.ran:
	case <-time.After(2 * time.Minute):
		t.Fatal("the stop did not finish")
	}
	took := time.Since(start)
	r.ran <- nil // for the cleanup
	rebalance := sarama.NewConfig().Consumer.Group.Rebalance.Timeout
	t.Logf("stop under commit faults took %v (rebalance timeout %v, shutdown timeout 10s), %d commits refused, Run: %v", took.Round(time.Millisecond), rebalance, refused.Load(), err)
	require.Less(t, took, rebalance, "the stop finished inside the rebalance timeout")
	if err != nil {
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	}
}

// TestExactlyOnceAfterAtLeastOnceSkipsTheCarriedOffsets: the group's
// commit is an at-least-once one carrying offset 5 above the position 0
// (offset 5 completed by that run, its output already written: a clean
// stop of the key-scoped gate leaves such commits). An exactly-once member
// processes 0..4 and stops cleanly; its commit must still carry 5, so that
// the next exactly-once member, once 5..9 exist, skips 5 and processes the
// rest: every offset but 5 processed and output once, 5 never. Runs on
// kfake and on a real broker.
func TestExactlyOnceAfterAtLeastOnceSkipsTheCarriedOffsets(t *testing.T) {
	b := testbroker.New(t)
	in, out := b.Topic(t, 1), b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	produce := func(from, to int) {
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Key: sarama.StringEncoder(fmt.Sprint("k", i)), Value: sarama.StringEncoder(fmt.Sprintf("click|%d", i))})
		}
		b.Produce(t, in, msgs...)
	}
	produce(0, 5)
	md, err := commit.EncodeMetadata(0, []commit.Checkpoint{{Stage: "click", Next: 0, Above: []int64{5}}})
	require.NoError(t, err)
	cc := *b.Config()
	cc.Version = sarama.V2_5_0_0
	client, err := sarama.NewClient(b.Addrs(), &cc)
	require.NoError(t, err)
	require.NoError(t, kafka.NewTestCommitter(client, group, in, 0).Commit(context.Background(), 0, md))
	require.NoError(t, client.Close())

	var calls [10]atomic.Int32
	run := func(upTo int64) {
		tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: b.Addrs(), TransactionalID: testbroker.Name(t, "txn"),
			Timeout: 5 * time.Second, Sarama: b.Config(), Logger: testLogger(t)})
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Close()) }()
		w := &commitWaiter{want: upTo, ch: make(chan struct{})}
		proc := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, ev *chain.Event) error {
			calls[ev.Offset].Add(1)
			pc.Emit(chain.Message{Key: ev.Key, Value: fmt.Appendf(nil, "o=%d", ev.Offset)})
			return nil
		})
		m := runMember(t, groupConfig(b, in, group, t), func(*member) *chain.Chain {
			ch, err := chain.New([]chain.Stage{{Name: "click", Processor: proc}}, decoder,
				chainOptions(t, w, chain.WithExactlyOnce(tx), chain.WithOutputTopic(out))...)
			require.NoError(t, err)
			return ch
		})
		select {
		case <-w.ch:
		case <-m.done:
			t.Fatalf("Run ended: %v", m.err)
		case <-time.After(waitTimeout):
			t.Fatalf("no commit at %d", upTo)
		}
		err, _ = m.stop(t)
		require.NoError(t, err)
	}
	run(5)
	cps, ok := commit.DecodeMetadata(groupOffsets(t, b, group, in, []int32{0})[0].Metadata, 5, []string{"click"})
	require.True(t, ok)
	require.Equal(t, []int64{5}, cps[0].Above, "the exactly-once commit at 5 still carries 5")
	produce(5, 10)
	run(10)

	for o := range calls {
		want := int32(1)
		if o == 5 {
			want = 0
		}
		require.Equal(t, want, calls[o].Load(), "offset %d processed %d times", o, calls[o].Load())
	}
	b.WaitStable(t, out)
	seen := map[string]int{}
	for _, m := range b.ReadAll(t, out, true)[0] {
		seen[string(m.Value)]++
	}
	require.Len(t, seen, 9)
	require.Zero(t, seen["o=5"])
	for v, n := range seen {
		require.Equal(t, 1, n, "output %s visible %d times", v, n)
	}
}
