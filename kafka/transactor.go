package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
)

// DefaultTransactionTimeout is the transaction timeout a Transactor asks for
// (transaction.timeout.ms) unless configured: below sarama's (and Kafka's)
// default group session timeout of 10 s, so that a member expelled for
// silence has had its open transaction aborted by the transaction
// coordinator by the time its partitions restart elsewhere — an open
// transaction holds the last stable offset of every partition it wrote to,
// and with it every read_committed reader, a restore included.
const DefaultTransactionTimeout = 9 * time.Second

// TransactorConfig configures NewTransactor. Brokers and TransactionalID
// are required.
type TransactorConfig struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// TransactionalID identifies the process's producer to the transaction
	// coordinator across restarts: a new producer with the same id fences
	// the previous one and aborts its open transaction at once. Stable per
	// process: TransactionalID(group, instance) with an instance id kept in
	// the state directory (store.DB.InstanceID). Two live processes must
	// never share one (each would fence the other at every recovery).
	TransactionalID string
	// Timeout is the transaction timeout: the coordinator aborts a
	// transaction left open this long (a crashed process's). Default
	// DefaultTransactionTimeout; at most the brokers'
	// transaction.max.timeout.ms (15 minutes by default). Keep it above the
	// chain's commit interval plus a cycle, and below the group's session
	// timeout.
	Timeout time.Duration
	// Changelog is the chain's changelog (the topic AppendChangelog writes
	// to); nil for a chain without one.
	Changelog *Changelog
	// Sarama is an optional base configuration (version, TLS, SASL,
	// batching, compression, the partitioner of outputs). It is copied,
	// never modified. The Transactor overrides what transactions depend on:
	// idempotence, acks=all, one open request per connection, the
	// transactional id and timeout, successes and errors returned, and a
	// protocol version of at least 2.5 (KIP-447 fencing by generation).
	Sarama *sarama.Config
	// Security configures TLS and SASL, as Config.Security does.
	Security Security
	// Logger receives the Transactor's logs. Default: discard.
	Logger *slog.Logger
	// Registry, when set, becomes sarama's MetricRegistry. Default: the base's.
	Registry metrics.Registry
}

// FencedMetric is the counter, in the Transactor's metric registry
// (TransactorConfig.Registry), of the producer sessions replaced because
// they were fenced: another producer initialised the same transactional id
// (a second process with this one's state directory), or the transaction
// coordinator aborted a transaction at its timeout and bumped the epoch.
const FencedMetric = "differential.txn.fenced"

// txnRetryBackoff is the transactional producer's pause before the retry
// of a transaction request (sarama's Producer.Transaction.Retry): 5 ms,
// doubling to at most sarama's 100 ms. The common retry is AddPartitionsToTxn
// answered CONCURRENT_TRANSACTIONS right after the previous cycle's EndTxn,
// while the coordinator still writes its markers, which takes a few ms; a
// flat 100 ms held the cycle's first sends to a new partition that long.
// With sarama's 50 retries the whole bound stays near its 5 s.
func txnRetryBackoff(retries, _ int) time.Duration {
	return min(5*time.Millisecond<<min(retries, 5), 100*time.Millisecond)
}

// TransactionalID is the transactional id of a process of group whose
// instance id is instance (kept in its state directory).
func TransactionalID(group, instance string) string {
	return group + "." + instance
}

func (c *TransactorConfig) saramaConfig() (*sarama.Config, error) {
	if err := needBrokers("TransactorConfig", c.Brokers); err != nil {
		return nil, err
	}
	if c.TransactionalID == "" {
		return nil, errors.New("kafka: TransactorConfig.TransactionalID is required")
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("kafka: TransactorConfig.Timeout must be >= 0, got %v", c.Timeout)
	}
	base, err := secured(c.Sarama, c.Security)
	if err != nil {
		return nil, err
	}
	// TxnOffsetCommit v3 carries the member's generation (KIP-447): 2.5.
	sc := idempotent(base, "-transactions", c.Registry, sarama.V2_5_0_0)
	sc.Producer.Transaction.ID = c.TransactionalID
	if sc.Producer.Transaction.Retry.BackoffFunc == nil {
		sc.Producer.Transaction.Retry.BackoffFunc = txnRetryBackoff
	}
	sc.Producer.Transaction.Timeout = DefaultTransactionTimeout
	if c.Timeout > 0 {
		sc.Producer.Transaction.Timeout = c.Timeout
	}
	// Outputs keep the base's partitioner (by key); changelog records name
	// their partition (that of their input partition).
	outputs := sc.Producer.Partitioner
	if outputs == nil {
		outputs = sarama.NewHashPartitioner
	}
	if cl := c.Changelog; cl != nil {
		topic := cl.Topic()
		sc.Producer.Partitioner = func(t string) sarama.Partitioner {
			if t == topic {
				return sarama.NewManualPartitioner(t)
			}
			return outputs(t)
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("kafka: sarama configuration of the transactional producer: %w", err)
	}
	return &sc, nil
}

// Transactor is the chain.Transactor on Kafka: one transactional sarama
// producer, on its own client (no fetch long-poll shares its connections),
// writing outputs, dead letters and changelog records inside the open
// transaction and committing the consumed offsets into it with the group
// member's generation (AddOffsetsToTxnWithGroupMetadata, KIP-447).
//
// A failed send leaves sarama's transaction in an abortable state; a fenced
// producer (another producer initialised the same transactional id, or the
// coordinator aborted the transaction at its timeout) in a fatal one. Abort
// handles both: it aborts, or closes the producer and starts a new producer
// session (InitProducerId) on the same client, so the process goes on
// without an exit.
//
// Produce, AppendChangelog, Commit, Abort and Close may be called from any
// goroutine; the chain never overlaps Commit or Abort with sends.
type Transactor struct {
	client sarama.Client
	sc     *sarama.Config
	cl     *Changelog
	log    *slog.Logger

	// mu is held for reading while sending, for writing by Commit, Abort,
	// a producer's replacement and Close.
	mu     sync.RWMutex
	ap     sarama.AsyncProducer
	reads  *sync.WaitGroup // the current producer's Successes and Errors readers
	closed bool
	// waiting are the sends of the current session not yet acknowledged
	// or failed: a fenced session's are failed at once by Abort (sarama
	// would retry them for seconds against a producer that can never
	// commit), and the session is closed in the background (retired).
	waiting struct {
		sync.Mutex
		m map[any]func(error)
	}
	retired sync.WaitGroup

	// open: BeginTxn was called for the current transaction; under txMu
	// (which senders take under mu's read lock).
	txMu sync.Mutex
	open bool

	// topics remembers, per topic, what the brokers accept (topicSizes):
	// a send at or above a size limit learned from a message refused
	// alone fails before it is sent (chain.ErrMessageTooLarge), because in
	// a transaction every failed send also fails the transaction.
	topics sync.Map // topic -> *topicSizes
	// now is the clock of topicSizes (tests set another: export_test.go).
	now func() time.Time

	// fenced counts the producer sessions replaced because they were
	// fenced (FencedMetric); sawFenced says the current session saw an
	// error saying so.
	fenced    metrics.Counter
	sawFenced atomic.Bool

	// faults are tests' (export_test.go): Commit fails with before's error
	// just before CommitTxn (the transaction still open), or with after's
	// once CommitTxn succeeded (as when EndTxn's response is lost). Under mu.
	faults struct{ before, after func() error }
}

var (
	_ chain.Transactor     = (*Transactor)(nil)
	_ chain.CommitResolver = (*Transactor)(nil)
)

// NewTransactor connects the transactional producer: it initialises the
// transactional id (InitProducerId), which fences any older producer with
// the same id and aborts the transaction it left open.
func NewTransactor(cfg TransactorConfig) (*Transactor, error) {
	client, sc, log, err := dial(cfg.Brokers, cfg.Security, cfg.Logger, cfg.saramaConfig, "transactional producer", sarama.NewClient)
	if err != nil {
		return nil, err
	}
	t := &Transactor{client: client, sc: sc, cl: cfg.Changelog, log: log.With("transactional_id", cfg.TransactionalID), now: time.Now}
	reg := sc.MetricRegistry
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	t.fenced = metrics.GetOrRegisterCounter(FencedMetric, reg)
	if err := retryStart(t.log, startAttempts, time.Second, t.startProducer); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: transactional producer %q: %w", cfg.TransactionalID, explainTxn(err))
	}
	return t, nil
}

// startAttempts bounds how long NewTransactor retries initialising the
// transactional id while the brokers cannot serve it: a process restarted
// while the node holding its transaction coordinator is down (the chaos
// suite's broker-and-engine kill) waits for the coordinator to move — the
// brokers' session timeout plus an election — instead of exiting.
const startAttempts = time.Minute

// retryStart runs start until it succeeds, fails for a reason that is not
// transient (an authorization, a configuration the brokers refuse), or
// bound has passed, pausing pause between attempts.
func retryStart(log *slog.Logger, bound, pause time.Duration, start func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := start()
		if err == nil || !transient(err) || errors.Is(err, sarama.ErrInvalidTransactionTimeout) || time.Now().After(deadline) {
			return err
		}
		log.Warn("transactional producer: initialising the transactional id failed; retrying", "err", err, "pause", pause)
		time.Sleep(pause) // bounded by the deadline; nothing else is waiting yet
	}
}

// ErrNoTransactions is what a failed transactional producer start wraps
// when the cluster cannot run transactions for this process: the
// transaction state topic cannot exist (too few brokers for its replication
// factor or min.isr), an ACL refuses the transactional id (or, on brokers
// before 2.8, idempotent writes on the cluster), or the brokers are older
// than the transactions the Transactor needs (Kafka 2.5, KIP-447). The
// error names the fix; exactly-once mode cannot start until it is made.
var ErrNoTransactions = errors.New("the cluster cannot run transactions")

// explainTxn adds what to check to a failed transactional producer start.
func explainTxn(err error) error {
	switch {
	case errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable), errors.Is(err, sarama.ErrNotEnoughReplicas),
		errors.Is(err, sarama.ErrNotEnoughReplicasAfterAppend):
		return fmt.Errorf("%w: %w: no transaction coordinator: the brokers' transaction state topic (__transaction_state) cannot be created or has too few in-sync replicas: set transaction.state.log.replication.factor and transaction.state.log.min.isr to at most the number of brokers (both default to 3 and 2)", ErrNoTransactions, err)
	case errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed):
		return fmt.Errorf("%w: %w: an ACL refuses the transactional id: allow Write and Describe on it (kafka-acls.sh --add --allow-principal User:<principal> --operation Write --operation Describe --transactional-id <id>, or --resource-pattern-type prefixed with the group name)", ErrNoTransactions, err)
	case errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		return fmt.Errorf("%w: %w: an ACL refuses idempotent writes: allow IdempotentWrite on the cluster (kafka-acls.sh --add --allow-principal User:<principal> --operation IdempotentWrite --cluster)", ErrNoTransactions, err)
	case errors.Is(err, sarama.ErrUnsupportedVersion), errors.Is(err, sarama.ErrUnsupportedForMessageFormat):
		return fmt.Errorf("%w: %w: the brokers are too old: exactly-once needs Kafka 2.5 or later (transactional offset commits fenced by the group generation, KIP-447)", ErrNoTransactions, err)
	case errors.Is(err, sarama.ErrInvalidTransactionTimeout):
		return fmt.Errorf("%w (the transaction timeout exceeds the brokers' transaction.max.timeout.ms)", err)
	}
	return err
}

// startProducer creates a producer session on the client and its readers;
// under mu (or before the Transactor is shared).
func (t *Transactor) startProducer() error {
	ap, err := sarama.NewAsyncProducerFromClient(t.client)
	if err != nil {
		t.ap, t.reads = nil, nil
		return err
	}
	reads := &sync.WaitGroup{}
	readAcks(reads, ap, func(m *sarama.ProducerMessage) {
		switch w := m.Metadata.(type) {
		case *txnSend:
			w.resolve(nil, t.now())
			w.g.ack(nil)
		case *appendWaiter:
			w.ack(m.Offset, nil)
		}
	}, func(pe *sarama.ProducerError) {
		t.noteFenced(pe.Err)
		err := fmt.Errorf("kafka: produce to %s in the transaction: %w: %w", pe.Msg.Topic, chain.ErrTransaction, pe.Err)
		switch w := pe.Msg.Metadata.(type) {
		case *txnSend:
			w.resolve(pe.Err, t.now())
			w.g.ack(err)
		case *appendWaiter:
			w.ack(-1, err)
		default:
			t.log.Error("produce failed", "topic", pe.Msg.Topic, "err", pe.Err)
		}
	})
	t.ap, t.reads = ap, reads
	t.open = false
	t.sawFenced.Store(false)
	return nil
}

// noteFenced remembers that the current session was fenced, if err says so.
func (t *Transactor) noteFenced(err error) {
	if IsFenced(err) {
		t.sawFenced.Store(true)
	}
}

// track registers a send's failure callback until it resolves (untrack).
func (t *Transactor) track(k any, fail func(error)) {
	t.waiting.Lock()
	if t.waiting.m == nil {
		t.waiting.m = map[any]func(error){}
	}
	t.waiting.m[k] = fail
	t.waiting.Unlock()
}

func (t *Transactor) untrack(k any) {
	t.waiting.Lock()
	delete(t.waiting.m, k)
	t.waiting.Unlock()
}

// failWaiting fails every send still waiting (their later results are
// ignored: each callback runs once).
func (t *Transactor) failWaiting(err error) {
	t.waiting.Lock()
	m := t.waiting.m
	t.waiting.m = nil
	t.waiting.Unlock()
	for _, fail := range m {
		fail(err)
	}
}

// retire replaces the current session without waiting for its sends:
// they fail now, and the session closes in the background (Close waits
// for it). Under mu.
func (t *Transactor) retire() {
	if t.ap == nil {
		return
	}
	t.failWaiting(fmt.Errorf("kafka: %w: the producer session was fenced and is replaced", chain.ErrTransaction))
	ap, reads := t.ap, t.reads
	t.ap, t.reads, t.open = nil, nil, false
	t.retired.Go(func() {
		ap.AsyncClose()
		reads.Wait()
	})
}

// stopProducer closes the current producer session and waits for its
// readers; under mu.
func (t *Transactor) stopProducer() {
	if t.ap == nil {
		return
	}
	t.ap.AsyncClose()
	t.reads.Wait()
	t.ap, t.reads = nil, nil
	t.open = false
}

// checkSize fails a message before it is sent when it is larger than the
// producer (Producer.MaxMessageBytes) or the broker (a limit learned from a
// message refused alone, see topicSizes) accepts: in a transaction a failed
// send fails the whole transaction, so the chain's fallback (a minimal dead
// letter) must see the refusal without a send. alone says the message must
// be the only one in flight to its topic when it is sent.
func (t *Transactor) checkSize(pm *sarama.ProducerMessage, ts *topicSizes, size int) (alone bool, err error) {
	if size > t.sc.Producer.MaxMessageBytes {
		return false, fmt.Errorf("kafka: produce to %s: %w: %d bytes > Producer.MaxMessageBytes %d", pm.Topic, chain.ErrMessageTooLarge, size, t.sc.Producer.MaxMessageBytes)
	}
	limit, alone := ts.check(size, t.now())
	if limit > 0 {
		return false, fmt.Errorf("kafka: produce to %s: %w: %d bytes (the broker refused %d bytes sent alone)", pm.Topic, chain.ErrMessageTooLarge, size, limit)
	}
	return alone, nil
}

// errNoSession: the last attempt to start a producer session failed; the
// next Abort tries again.
var errNoSession = errors.New("kafka: no transactional producer session (starting one failed)")

// beginLocked opens the transaction if none is; under mu (read or write).
func (t *Transactor) beginLocked() error {
	t.txMu.Lock()
	defer t.txMu.Unlock()
	if t.ap == nil {
		return fmt.Errorf("kafka: begin transaction: %w: %w", chain.ErrTransaction, errNoSession)
	}
	if t.open {
		return nil
	}
	if err := t.ap.BeginTxn(); err != nil {
		t.noteFenced(err)
		return fmt.Errorf("kafka: begin transaction: %w: %w", chain.ErrTransaction, err)
	}
	t.open = true
	return nil
}

// Produce implements chain.Producer inside the open transaction (opening
// one when none is). done gets nil once every message is acknowledged;
// errors wrap chain.ErrTransaction, except a message too large, which
// wraps chain.ErrMessageTooLarge and is refused before anything is sent.
// A message that must be sent alone (topicSizes) waits for its topic's
// messages in flight, and holds back the next ones until it is resolved.
func (t *Transactor) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	if len(msgs) == 0 {
		done(nil)
		return
	}
	pms := make([]*sarama.ProducerMessage, len(msgs))
	g := &ackGroup{}
	g.done = func(err error) {
		t.untrack(g)
		done(err)
	}
	g.remaining.Store(int64(len(msgs)))
	for i := range msgs {
		pms[i] = toProducerMessage(&msgs[i], nil)
		w := &txnSend{g: g, ts: t.sizes(pms[i].Topic), size: messageSize(pms[i])}
		alone, err := t.checkSize(pms[i], w.ts, w.size)
		if err != nil {
			g.ack(err)
			return
		}
		w.alone = alone
		pms[i].Metadata = w
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		g.ack(ErrProducerClosed)
		return
	}
	if err := t.beginLocked(); err != nil {
		g.ack(err)
		return
	}
	t.track(g, g.ack)
	for _, pm := range pms {
		w := pm.Metadata.(*txnSend)
		// Messages of the transaction may have been sent: it must not
		// commit without the rest.
		if err := w.ts.acquire(ctx, w.alone); err != nil {
			g.ack(fmt.Errorf("kafka: produce to %s: not handed over: %w: %w", pm.Topic, chain.ErrTransaction, err))
			return
		}
		select {
		case t.ap.Input() <- pm:
		case <-ctx.Done():
			w.resolve(ctx.Err(), t.now())
			g.ack(fmt.Errorf("kafka: produce to %s: not handed over: %w: %w", pm.Topic, chain.ErrTransaction, ctx.Err()))
			return
		}
	}
}

// AppendChangelog implements chain.Transactor: recs go, in order, to the
// changelog partition of input partition partition, inside the open
// transaction.
func (t *Transactor) AppendChangelog(ctx context.Context, topic string, partition int32, recs []chain.ChangelogRecord) (int64, error) {
	if t.cl == nil {
		return 0, errors.New("kafka: the Transactor has no changelog (TransactorConfig.Changelog)")
	}
	if topic != t.cl.input {
		return 0, fmt.Errorf("kafka: changelog %q holds the state of topic %q, not %q", t.cl.topic, t.cl.input, topic)
	}
	if len(recs) == 0 {
		return 0, errors.New("kafka: AppendChangelog without records")
	}
	// A partition added to the input has a changelog partition the
	// transactional client may not know yet (Changelog.Partition grew it).
	if err := refreshPartitions(t.client, t.cl.topic, partition); err != nil {
		return 0, fmt.Errorf("kafka: changelog %s/%d: %w", t.cl.topic, partition, err)
	}
	w := &appendWaiter{last: -1, done: make(chan struct{})}
	w.remaining.Store(int64(len(recs)))
	defer t.untrack(w)
	if err := t.sendChangelog(ctx, partition, recs, w); err != nil {
		return 0, err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("kafka: changelog %s/%d: waiting for acknowledgements: %w: %w", t.cl.topic, partition, chain.ErrTransaction, ctx.Err())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, fmt.Errorf("kafka: changelog %s/%d: append: %w", t.cl.topic, partition, w.err)
	}
	return w.last + 1, nil
}

func (t *Transactor) sendChangelog(ctx context.Context, partition int32, recs []chain.ChangelogRecord, w *appendWaiter) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return fmt.Errorf("kafka: changelog %s: %w", t.cl.topic, ErrProducerClosed)
	}
	if err := t.beginLocked(); err != nil {
		return err
	}
	t.track(w, func(err error) { w.ack(-1, err) })
	for i := range recs {
		m := &sarama.ProducerMessage{Topic: t.cl.topic, Partition: partition, Key: sarama.ByteEncoder(recs[i].Key), Metadata: w}
		if recs[i].Value != nil {
			m.Value = sarama.ByteEncoder(recs[i].Value)
		}
		select {
		case t.ap.Input() <- m:
		case <-ctx.Done():
			return fmt.Errorf("kafka: changelog %s/%d: append: not handed over: %w: %w", t.cl.topic, partition, chain.ErrTransaction, ctx.Err())
		}
	}
	return nil
}

// Commit implements chain.Transactor: the offsets are added to the
// transaction in the name of each partition's group member (its session's
// generation and member id, read now), then the transaction commits.
func (t *Transactor) Commit(ctx context.Context, offsets []chain.TxnOffset) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrProducerClosed
	}
	if !t.open && len(offsets) == 0 {
		return nil
	}
	if err := t.beginLocked(); err != nil {
		return err
	}
	type key struct {
		group      string
		generation int32
		member     string
	}
	byMember := map[key]map[string][]*sarama.PartitionOffsetMetadata{}
	metas := map[key]*sarama.ConsumerGroupMetadata{}
	for _, o := range offsets {
		pc, err := runCommitter(o)
		if err != nil {
			return err
		}
		gm := &sarama.ConsumerGroupMetadata{GroupID: pc.o.group, GenerationID: sarama.GroupGenerationUndefined}
		if pc.m != nil {
			gm.GenerationID, gm.MemberID = pc.m.GenerationID(), pc.m.MemberID()
			if id := pc.o.client.Config().Consumer.Group.InstanceId; id != "" {
				gm.GroupInstanceID = &id
			}
		}
		k := key{gm.GroupID, gm.GenerationID, gm.MemberID}
		if byMember[k] == nil {
			byMember[k] = map[string][]*sarama.PartitionOffsetMetadata{}
			metas[k] = gm
		}
		md := o.Metadata
		byMember[k][o.Topic] = append(byMember[k][o.Topic], &sarama.PartitionOffsetMetadata{
			Partition: o.Partition, Offset: o.Offset, LeaderEpoch: -1, Metadata: &md})
	}
	for k, offs := range byMember {
		if err := t.ap.AddOffsetsToTxnWithGroupMetadata(offs, metas[k]); err != nil {
			t.noteFenced(err)
			return fmt.Errorf("kafka: add offsets to the transaction (group %q, generation %d): %w", k.group, k.generation, err)
		}
	}
	if f := t.faults.before; f != nil {
		if err := f(); err != nil {
			return fmt.Errorf("kafka: commit transaction: %w", err)
		}
	}
	if err := t.ap.CommitTxn(); err != nil {
		t.noteFenced(err)
		return fmt.Errorf("kafka: commit transaction: %w", err)
	}
	// Committed: whatever ctx says now, the chain must not abort it.
	t.txMu.Lock()
	t.open = false
	t.txMu.Unlock()
	if f := t.faults.after; f != nil {
		if err := f(); err != nil {
			return fmt.Errorf("kafka: commit transaction: %w", err)
		}
	}
	return nil
}

// runCommitter is o's Committer as kafka.Run hands it to its partitions:
// a Transactor commits only the offsets of partitions Run assigned.
func runCommitter(o chain.TxnOffset) (*partitionCommitter, error) {
	pc, ok := o.Committer.(*partitionCommitter)
	if !ok {
		return nil, fmt.Errorf("kafka: offsets of %s/%d: the committer (%T) is not a Run's: a Transactor commits the offsets of partitions kafka.Run assigned", o.Topic, o.Partition, o.Committer)
	}
	return pc, nil
}

// ResolveCommit implements chain.CommitResolver, after a Commit of offsets
// failed. It settles the transaction first, as Abort does: sarama aborts
// it, or — when it can no longer (the coordinator refuses to abort a
// transaction whose commit decision it wrote; a fenced or failed producer)
// — a new producer session starts, whose InitProducerId completes or aborts
// what the previous one left open. Then it fetches the committed offsets of
// the offsets' partitions with RequireStable, which the group coordinator
// answers with UNSTABLE_OFFSET_COMMIT while a transaction's offsets are
// pending (retried, with a growing pause, until ctx ends), and compares
// each, offset and metadata, with what the cycle sent. A settle that failed
// is logged, not returned: the stable read still tells a transaction that
// committed (its offsets) from one that did not (it is aborted at the
// latest at the transaction timeout, and its pending offsets with it).
func (t *Transactor) ResolveCommit(ctx context.Context, sent []chain.TxnOffset) (bool, error) {
	if err := t.Abort(ctx); err != nil {
		t.log.Warn("settling the transaction whose commit failed; reading the committed offsets all the same", "err", err)
	}
	type source struct {
		o     *offsets
		topic string
	}
	parts := map[source][]int32{}
	srcs := make([]source, len(sent))
	for i, o := range sent {
		pc, err := runCommitter(o)
		if err != nil {
			return false, err
		}
		srcs[i] = source{pc.o, o.Topic}
		parts[srcs[i]] = append(parts[srcs[i]], o.Partition)
	}
	got := make(map[source]map[int32]committed, len(parts))
	for src, ps := range parts {
		cs, err := src.o.fetchStable(ctx, src.topic, ps)
		if err != nil {
			return false, fmt.Errorf("kafka: learning whether the failed commit committed: %w", err)
		}
		got[src] = cs
	}
	var differ []string
	for i, o := range sent {
		if c := got[srcs[i]][o.Partition]; c.offset != o.Offset || c.metadata != o.Metadata {
			differ = append(differ, fmt.Sprintf("%s/%d at %d (sent %d)", o.Topic, o.Partition, c.offset, o.Offset))
		}
	}
	// The chain logs the outcome it acts on.
	switch len(differ) {
	case 0:
		return true, nil
	case len(sent):
		return false, nil
	}
	return false, fmt.Errorf("kafka: %d of %d partitions hold other committed offsets or metadata than the transaction's (%s): another member committed, or the offsets were reset",
		len(differ), len(sent), strings.Join(differ, ", "))
}

// Abort implements chain.Transactor: it aborts the open transaction, or —
// when sarama's producer can no longer (fenced, a fatal error, an abort
// that failed) — replaces the producer session: closing it and initialising
// the transactional id again aborts whatever it left open.
func (t *Transactor) Abort(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrProducerClosed
	}
	if t.ap == nil {
		if err := t.startProducer(); err != nil {
			return fmt.Errorf("kafka: new transactional producer session: %w", explainTxn(err))
		}
		return nil
	}
	st := t.ap.TxnStatus()
	if st&sarama.ProducerTxnFlagFatalError == 0 {
		if !t.open && st&sarama.ProducerTxnFlagInError == 0 {
			return nil
		}
		err := t.ap.AbortTxn()
		if err == nil {
			t.open = false
			return nil
		}
		t.noteFenced(err)
		t.log.Warn("aborting the transaction failed; starting a new producer session", "err", err, "fenced", IsFenced(err))
	} else {
		t.log.Warn("the transactional producer is fenced or failed for good; starting a new producer session (it fences any other producer with this transactional id)",
			"status", st.String())
	}
	if t.sawFenced.Load() {
		t.fenced.Inc(1)
	}
	t.retire()
	if err := t.startProducer(); err != nil {
		// The next send fails and the chain aborts again (with backoff),
		// and this tries again.
		return fmt.Errorf("kafka: new transactional producer session: %w", explainTxn(err))
	}
	return nil
}

// Close aborts a transaction left open (a Run that stopped cleanly has
// committed or aborted everything) and closes the producer and its client.
// Idempotent.
func (t *Transactor) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if t.open && t.ap != nil {
		if err := t.ap.AbortTxn(); err != nil {
			t.log.Warn("aborting the open transaction at close", "err", err)
		}
	}
	t.stopProducer()
	t.retired.Wait()
	return t.client.Close()
}
