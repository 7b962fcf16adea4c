package chain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/commit"
)

// Transactor is the Kafka side of exactly-once mode (DESIGN.md "Exactly-once mode",
// WithExactlyOnce): one transactional producer for the whole process.
// kafka.Transactor implements it on sarama; chaintest has an in-memory one.
//
// The chain runs one transaction per commit cycle. Between two cycles it
// calls Produce (outputs and dead letters) and AppendChangelog from any
// goroutine; a transaction opens with the first of them. A cycle then
// calls, from one goroutine and while no Produce or AppendChangelog is in
// progress, Commit — or Abort, when anything of the cycle failed — and the
// next call opens the next transaction. (The stages do not stop during a
// cycle: the sends of the records they begin after the cycle's cut are
// held back until its Commit or Abort returned; see txnCoordinator.)
type Transactor interface {
	// Producer sends outputs and dead letters inside the open transaction.
	// An error that ends the transaction (the client can no longer commit
	// it: a failed send, a fenced producer) wraps ErrTransaction; the
	// chain then aborts the cycle and restarts every partition from its
	// last committed positions. Other errors (ErrMessageTooLarge, detected
	// before anything was sent) are the record's own, as without
	// transactions.
	Producer
	// AppendChangelog writes recs, in order, inside the open transaction to
	// the changelog partition that holds the state of input topic/partition,
	// and returns once every one is acknowledged the offset after the last
	// one (the records are readable, read_committed, only once the
	// transaction commits).
	AppendChangelog(ctx context.Context, topic string, partition int32, recs []ChangelogRecord) (end int64, err error)
	// Commit adds offsets to the open transaction — each with its
	// partition's Committer, through which the adapter names the group
	// member (KIP-447: the coordinator refuses a member of an older
	// generation, so a zombie cannot commit) — and commits it. With nothing
	// produced and no offsets it does nothing. An error may come after the
	// transaction coordinator decided to commit (EndTxn's response lost):
	// the transaction then commits all the same. A Transactor that can
	// learn the outcome implements CommitResolver, which the chain asks
	// before it treats a failed Commit as an abort; without it the chain
	// calls Abort and rewinds, which repeats the cycle's outputs in that
	// case.
	Commit(ctx context.Context, offsets []TxnOffset) error
	// Abort aborts the open transaction, if any, and makes the Transactor
	// ready for the next one (after a fencing: a new producer session). Its
	// error is logged; the chain restarts the partitions either way.
	Abort(ctx context.Context) error
}

// CommitResolver is what a Transactor implements to learn the outcome of a
// transaction whose Commit failed. EndTxn can fail after the transaction
// coordinator wrote its commit decision (the connection lost on the
// response): the transaction then commits, and a chain that rewound its
// partitions to the previous cycle would write the cycle's outputs again.
// After a Commit with offsets fails, the chain calls ResolveCommit with the
// same offsets, before it drops anything the cycle prepared (DESIGN.md
// "Exactly-once mode": a failed commit).
//
// ResolveCommit first makes sure the transaction is no longer pending —
// aborted or completed: an abort, or a new producer session, whose
// initialisation completes or aborts what the previous one left open — and
// then reads the committed offsets of the offsets' partitions, read_committed
// (it waits while a transaction's offsets are pending, RequireStable). It
// reports true when every offset, with its metadata, is its partition's
// committed one (the transaction committed), false when none is (it did
// not), and an error when it cannot tell: the read keeps failing until ctx
// ends, or some partitions hold the cycle's offsets and others do not (or
// another member's). It leaves no transaction open: the next Produce or
// AppendChangelog opens the next one.
//
// The chain then takes the cycle as committed (no rewind), aborts it as
// any failed cycle, or — unknown — fails the partitions whose offsets the
// transaction held without rewinding them: they restart from what the
// brokers hold (ErrTxnOutcomeUnknown).
type CommitResolver interface {
	ResolveCommit(ctx context.Context, offsets []TxnOffset) (committed bool, err error)
}

// TxnOffset is one partition's consumed offset and commit metadata in a
// transaction.
type TxnOffset struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
	// Committer is the partition's Assignment.Committer.
	Committer Committer
}

// ErrTransaction is what a Transactor's errors wrap when the open
// transaction can no longer commit.
var ErrTransaction = errors.New("chain: the transaction failed")

// ErrTxnAborted is the final result of a partition whose last cycle was
// aborted: nothing it completed since its last committed cycle is
// committed, and none of its outputs since then is visible to
// read_committed readers; the next owner resumes at the last commit.
var ErrTxnAborted = errors.New("chain: the transaction holding the partition's final checkpoint was aborted")

// ErrTxnOutcomeUnknown is the error of a partition whose cycle's Commit
// failed and whose transaction's outcome the Transactor could not learn
// (CommitResolver): the transaction may have committed the cycle or not, so
// neither the cycle's positions nor the previous ones are known to be the
// committed ones, and the partition fails without committing anything more.
// Its next start (a new owner, or this process restarted by its supervisor:
// kafka.Run returns the error) resumes from the brokers' committed offsets,
// read with RequireStable, and restores the state from the changelog,
// read_committed — whichever way the transaction ended, nothing is
// repeated or lost.
var ErrTxnOutcomeUnknown = errors.New("chain: the commit of the transaction failed and its outcome is unknown")

// TxnObserver is an Observer that is also told how every exactly-once
// commit cycle that held a transaction ended (e.g. to count commits and
// aborts, as chain/chainmetrics does). TxnEnded runs on the coordinator's
// goroutine after the cycle's Commit or Abort returned; it must be fast.
type TxnObserver interface {
	Observer
	TxnEnded(TxnInfo)
}

// TxnInfo describes one ended transaction (TxnObserver).
type TxnInfo struct {
	// Committed: the transaction committed (also when its Commit was
	// reported failed and the Transactor learned that it committed).
	Committed bool
	// Cause says why it was aborted (empty when committed); Err is the
	// error that aborted it.
	Cause TxnAbortCause
	Err   error
	// Duration is the cycle's, from its cut to the end of its Commit or
	// Abort.
	Duration time.Duration
	// Outputs counts the outputs and dead letters sent into the
	// transaction, ChangelogRecords the state changes appended to the
	// changelog, Offsets the partitions whose consumed offsets it held.
	Outputs, ChangelogRecords int64
	Offsets                   int
}

// TxnAbortCause classifies why a transaction was aborted (TxnInfo.Cause).
type TxnAbortCause string

const (
	// TxnAbortSend: a send of the transaction failed (a broker refused an
	// output, the producer was fenced or timed out), ErrTransaction.
	TxnAbortSend TxnAbortCause = "send"
	// TxnAbortDrain: the records below the cycle's cut did not complete
	// within the shutdown timeout, or a stopping partition abandoned
	// records in flight.
	TxnAbortDrain TxnAbortCause = "drain"
	// TxnAbortCheckpoint: a partition's positions or store checkpoint could
	// not be prepared (records completed above a failed one, a store error).
	TxnAbortCheckpoint TxnAbortCause = "checkpoint"
	// TxnAbortChangelog: appending a partition's state changes failed.
	TxnAbortChangelog TxnAbortCause = "changelog"
	// TxnAbortCommit: adding the offsets or committing failed, and the
	// transaction did not commit.
	TxnAbortCommit TxnAbortCause = "commit"
	// TxnAbortOutcomeUnknown: the commit failed and its outcome could not
	// be learned (ErrTxnOutcomeUnknown); the partitions it held fail.
	TxnAbortOutcomeUnknown TxnAbortCause = "outcome_unknown"
)

// TxnAbortCauses lists every TxnAbortCause.
var TxnAbortCauses = []TxnAbortCause{TxnAbortSend, TxnAbortDrain, TxnAbortCheckpoint, TxnAbortChangelog, TxnAbortCommit, TxnAbortOutcomeUnknown}

// Default bounds of an open transaction (WithTransactionLimits).
const (
	DefaultTxnMaxOutputs = 100_000
	DefaultTxnMaxWrites  = 100_000
)

// maxConsecutiveAborts bounds the cycles that abort in a row (each followed
// by a restart of every partition and a growing pause) before the chain
// gives up and fails its partitions: a failure that persists (an
// authorization, a deleted topic) must stop the process, not loop.
const maxConsecutiveAborts = 10

// ExactlyOnce reports whether the chain runs in exactly-once mode
// (WithExactlyOnce): the Kafka adapter then reads read_committed and fetches
// committed offsets with RequireStable.
func (c *Chain) ExactlyOnce() bool { return c.tc != nil }

// txnCoordinator runs an exactly-once chain's commit cycles: one goroutine
// (loop) while any partition is registered, one cycle at a time.
//
// A cycle: take every registered partition's cut (partitionRun.takeCut:
// each stage's begin frontier; the sends of records begun after it are
// deferred, sendGate) and wait until every record below the cuts has
// completed — outputs acknowledged inside the transaction; then, per
// partition, snapshot the positions (min(contiguous position, cut) per
// stage; below the cut a contiguous prefix: checked), prepare the store
// checkpoint, append its changelog records and compute the commit
// metadata; commit the transaction with every changed partition's offset;
// flush the deferred sends into the next transaction; persist the
// prepared checkpoints to the store. If anything fails: abort, drop the
// deferred sends with their records, drop every overlay, restart every
// partition at its last committed positions. The stages never pause.
type txnCoordinator struct {
	c   *Chain
	tx  Transactor
	log *slog.Logger

	// outputs and writes count what the open transaction holds since the
	// last cycle (approximately: they are reset when a cycle starts).
	outputs, writes atomic.Int64
	wake            chan struct{} // a cycle is wanted now (cap 1)
	// sent and appended count the outputs and dead letters sent, and the
	// changelog records appended, into the open transaction (TxnInfo);
	// reset when it ends.
	sent, appended atomic.Int64
	// obs hears of every ended transaction; nil when no observer is a
	// TxnObserver.
	obs TxnObserver

	mu struct {
		sync.Mutex
		parts   map[*partitionRun]*txnPart
		cycling bool
		running bool  // loop runs
		failure error // reported by a record (ErrTransaction): the next cycle aborts
		aborts  int   // consecutive aborted cycles
	}
}

// txnPart is a partition's registration.
type txnPart struct {
	// final: the partition stopped; the next cycle is its last.
	final bool
	// result gets the outcome of the partition's last cycle (nil, or why
	// it was aborted) when the partition leaves the coordinator.
	result chan error
}

func newTxnCoordinator(c *Chain) *txnCoordinator {
	tc := &txnCoordinator{c: c, tx: c.cfg.txn, log: c.cfg.logger, wake: make(chan struct{}, 1)}
	tc.mu.parts = map[*partitionRun]*txnPart{}
	tc.obs = txnObservers(c.cfg.observers)
	return tc
}

// register adds p, whose stages start must launch, to the cycles: under the
// coordinator's lock, so that a cycle either includes p with its stages or
// runs without it while p's sends are all deferred until the cycle ended.
func (tc *txnCoordinator) register(p *partitionRun, start func()) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.mu.cycling {
		p.txn.sends.deferAll(len(p.c.stages))
	}
	start()
	p.txn.part = &txnPart{result: make(chan error, 1)}
	tc.mu.parts[p] = p.txn.part
	if !tc.mu.running {
		tc.mu.running = true
		go tc.loop()
	}
}

// final asks for p's last cycle — p's stages have stopped and drained (or
// were abandoned) — and waits for its outcome: nil when the cycle committed
// p's final checkpoint. p's sends are dropped for ever after: nothing it
// might still send can enter a later transaction. p's stages have completed
// everything they began by then (its stop waited for it); the deferred
// sends of records completed above the open cycle's cut are flushed into
// the next transaction, whose drain waits for them. So whichever cycle
// runs when final is called, p leaves with the next one that starts after
// it, and that one holds all of p's sends.
func (tc *txnCoordinator) final(p *partitionRun) error {
	tc.mu.Lock()
	if tp := tc.mu.parts[p]; tp != nil {
		tp.final = true
	}
	tc.mu.Unlock()
	tc.request()
	return <-p.txn.part.result
}

// request wants a cycle now.
func (tc *txnCoordinator) request() {
	select {
	case tc.wake <- struct{}{}:
	default:
	}
}

// fail makes the next cycle abort: a record's output failed in a way that
// ends the transaction.
func (tc *txnCoordinator) fail(err error) {
	tc.mu.Lock()
	if tc.mu.failure == nil {
		tc.mu.failure = err
	}
	tc.mu.Unlock()
	tc.request()
}

// noteOutputs and noteWrite count the open transaction's contents and ask
// for an early cycle when a limit is passed.
func (tc *txnCoordinator) noteOutputs(n int) {
	tc.sent.Add(int64(n))
	if tc.outputs.Add(int64(n)) > int64(tc.c.cfg.txnMaxOutputs) {
		tc.request()
	}
}

func (tc *txnCoordinator) noteWrite() {
	if tc.writes.Add(1) > int64(tc.c.cfg.txnMaxWrites) {
		tc.request()
	}
}

// loop runs a cycle every commit interval (or when one is requested) until
// no partition is registered.
func (tc *txnCoordinator) loop() {
	interval := tc.c.cfg.commitInterval
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-tc.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		start := time.Now()
		if !tc.cycle() {
			return
		}
		t.Reset(max(interval-time.Since(start), 0))
	}
}

// cyclePart is one partition in a cycle.
type cyclePart struct {
	p     *partitionRun
	final bool // final at the cycle's start: it leaves after this cycle
	cut   []cutPoint
	// leave: the cycle aborted while the partition was stopping; it leaves
	// with nothing committed since its last cycle.
	leave bool
	prep  *txnPrepared
	// err is the cycle's outcome for the partition: nil when its
	// checkpoint committed.
	err error
}

// cycle runs one commit cycle; false when no partition is registered any
// more (the loop ends).
func (tc *txnCoordinator) cycle() bool {
	tc.mu.Lock()
	if len(tc.mu.parts) == 0 {
		tc.mu.running = false
		tc.mu.Unlock()
		return false
	}
	tc.mu.cycling = true
	parts := make([]*cyclePart, 0, len(tc.mu.parts))
	for p, tp := range tc.mu.parts {
		parts = append(parts, &cyclePart{p: p, final: tp.final})
	}
	failed := tc.mu.failure != nil
	tc.mu.Unlock()
	tc.writes.Store(0)
	start := time.Now()
	slices.SortFunc(parts, func(a, b *cyclePart) int {
		return cmp.Or(cmp.Compare(a.p.topic, b.p.topic), cmp.Compare(a.p.partition, b.p.partition))
	})
	for _, cp := range parts {
		cp.cut = cp.p.takeCut()
	}

	ctx, cancel := context.WithTimeout(context.Background(), tc.c.cfg.shutdownTimeout)
	defer cancel()
	var cause TxnAbortCause
	if failed {
		// The transaction cannot commit: abort it first, which fails the
		// sends still waiting for an answer (a fenced producer's would be
		// retried for seconds), so that the drain ends at once.
		if aerr := tc.tx.Abort(ctx); aerr != nil {
			tc.log.Warn("aborting the failed transaction", "err", aerr)
		}
	}
	err := tc.drain(parts)
	if err != nil {
		cause = TxnAbortDrain
	}
	// Every failure of the records this transaction holds has been reported
	// once they are drained (a record's failed send drops it); one taken
	// before the drain would leave its siblings' to abort the next cycle,
	// which holds none of them.
	tc.mu.Lock()
	if err == nil && tc.mu.failure != nil {
		err, cause = tc.mu.failure, TxnAbortSend
	}
	tc.mu.failure = nil
	tc.mu.Unlock()
	var offsets []TxnOffset
	if err == nil {
		// Every partition's half at once: each appends its changelog
		// records and waits for their acknowledgements, and one after
		// another those waits add up at short intervals.
		errs := make([]error, len(parts))
		var wg sync.WaitGroup
		for i, cp := range parts {
			wg.Go(func() { cp.prep, errs[i] = cp.p.prepareTxn(ctx, tc.tx, cp.cut) })
		}
		wg.Wait()
		for i, cp := range parts {
			if errs[i] != nil {
				if err == nil {
					err, cause = errs[i], TxnAbortCheckpoint
					if errors.Is(err, errChangelogAppend) {
						cause = TxnAbortChangelog
					}
				}
				continue
			}
			if cp.prep.changed {
				offsets = append(offsets, TxnOffset{Topic: cp.p.topic, Partition: cp.p.partition,
					Offset: cp.prep.offset, Metadata: cp.prep.metadata, Committer: cp.p.committer})
			}
		}
	}
	unknown := false
	if err == nil {
		if err = tc.tx.Commit(ctx, offsets); err != nil {
			err = fmt.Errorf("commit the transaction: %w", err)
			cause = TxnAbortCommit
			// The transaction may have committed all the same (EndTxn's
			// response lost): learn its outcome before anything of the
			// cycle is dropped.
			if r, ok := tc.tx.(CommitResolver); ok && len(offsets) > 0 {
				switch committed, rerr := tc.resolve(r, offsets); {
				case rerr != nil:
					unknown, cause = true, TxnAbortOutcomeUnknown
					err = fmt.Errorf("%w: %w; learning its outcome: %w", ErrTxnOutcomeUnknown, err, rerr)
				case committed:
					tc.log.Warn("the transaction's commit was reported failed, but the transaction committed (every partition's committed offset and metadata are the cycle's): the cycle is committed, nothing is rewound",
						"err", err, "partitions", len(offsets))
					err = nil
				default:
					tc.log.Info("the failed commit did not commit the transaction (no partition's committed offset is the cycle's): aborting the cycle", "partitions", len(offsets))
				}
			}
		}
	}
	// The transaction has ended: what it holds is counted now, before an
	// abort rewinds the partitions, whose records then send again into
	// the next one.
	sent, appended := tc.sent.Swap(0), tc.appended.Swap(0)
	switch {
	case unknown:
		tc.unknown(ctx, parts, err)
	case err != nil:
		tc.abort(ctx, parts, err)
		fallthrough
	default:
		for _, cp := range parts {
			cp.err = err
		}
	}
	tc.ended(start, err, cause, len(offsets), sent, appended)

	tc.mu.Lock()
	tc.mu.cycling = false
	var leaving []*cyclePart
	for _, cp := range parts {
		if cp.final || cp.leave {
			delete(tc.mu.parts, cp.p)
			leaving = append(leaving, cp)
		}
	}
	// Every registered partition's deferred sends — those of the cycle's
	// partitions above their cuts, and those of partitions registered
	// during the cycle — go into the next transaction (an aborted cycle
	// has dropped its partitions' already).
	flush := make([]*partitionRun, 0, len(tc.mu.parts))
	for p := range tc.mu.parts {
		flush = append(flush, p)
	}
	if err == nil {
		tc.mu.aborts = 0
	}
	aborts := tc.mu.aborts
	// The last partition left: the loop ends now (a partition registering
	// from here on starts a new one), not at its next tick.
	more := len(tc.mu.parts) > 0
	if !more {
		tc.mu.running = false
	}
	tc.mu.Unlock()

	// A leaving partition's sends are dropped, now and for ever: nothing it
	// might still send enters a later transaction.
	for _, cp := range leaving {
		cp.p.txn.sends.drop()
	}
	tc.outputs.Store(0)
	for _, p := range flush {
		p.txn.sends.flush()
	}

	// After CommitTxn, with the deferred sends flushed: the prepared
	// checkpoints hold their partitions' checkpoint locks, and the stages
	// read the committed writes from the overlays until the store has them
	// (DESIGN "Exactly-once mode": a crash in between leaves the store
	// behind the commit, and the restore catches it up from the changelog).
	// An aborted cycle has released them all; one of unknown outcome those
	// of the partitions it failed.
	for _, cp := range parts {
		if cp.err == nil && cp.prep != nil {
			cp.prep.persist()
		}
	}
	// A leaving partition's final wait ends after its store checkpoint was
	// written: the process may close the store once every partition
	// returned.
	for _, cp := range leaving {
		cp.p.txn.part.result <- cp.err
	}
	if err != nil && aborts > 1 && more {
		// A failure that repeats: do not spin.
		t := time.NewTimer(min(100*time.Millisecond<<min(aborts-2, 6), 5*time.Second))
		<-t.C
	}
	return more
}

// ended reports the cycle's transaction, which held sent outputs and dead
// letters and appended changelog records, to the TxnObserver, if any. A
// cycle with nothing sent, appended or committed held no transaction and
// is not reported.
func (tc *txnCoordinator) ended(start time.Time, err error, cause TxnAbortCause, offsets int, sent, appended int64) {
	if tc.obs == nil || (err == nil && sent == 0 && appended == 0 && offsets == 0) {
		return
	}
	info := TxnInfo{Committed: err == nil, Duration: time.Since(start), Outputs: sent, ChangelogRecords: appended, Offsets: offsets}
	if err != nil {
		info.Cause, info.Err = cause, err
		if info.Cause == "" {
			info.Cause = TxnAbortCommit
		}
	}
	tc.obs.TxnEnded(info)
}

// txnObservers combines the observers among obs that are TxnObservers (nil
// if none).
func txnObservers(obs []Observer) TxnObserver {
	var ts txnFanout
	for _, o := range obs {
		if t, ok := o.(TxnObserver); ok {
			ts = append(ts, t)
		}
	}
	switch len(ts) {
	case 0:
		return nil
	case 1:
		return ts[0]
	}
	return ts
}

type txnFanout []TxnObserver

func (f txnFanout) Begin(BeginInfo)                               {}
func (f txnFanout) Advanced(string, int32, int, int64, time.Time) {}
func (f txnFanout) Committed(string, int32, int64, string)        {}

func (f txnFanout) TxnEnded(info TxnInfo) {
	for _, o := range f {
		o.TxnEnded(info)
	}
}

// errChangelogAppend marks a cycle's failed changelog append (TxnAbortChangelog).
var errChangelogAppend = errors.New("append state changes to the changelog")

// drain waits until every record below the cycle's cuts has completed or
// been dropped (txnCut.pend); the stages meanwhile go on beginning and
// processing records above their cuts. A partition whose stop abandoned
// records (shutdown timeout) cannot drain: their outputs may be in the
// transaction without their positions, so the cycle must abort.
func (tc *txnCoordinator) drain(parts []*cyclePart) error {
	deadline := time.NewTimer(tc.c.cfg.shutdownTimeout)
	defer deadline.Stop()
	for _, cp := range parts {
		p := cp.p
		if p.isAbandoned() {
			return fmt.Errorf("partition %s/%d abandoned records in flight at its stop", p.topic, p.partition)
		}
		for i, s := range p.stages {
			for {
				ch := s.drained.wait()
				if s.txnCut().pend.Load() == 0 {
					break
				}
				select {
				case <-ch:
				case <-deadline.C:
					return fmt.Errorf("partition %s/%d stage %q: the records below the cycle's cut %d did not complete within %v of the cycle's start",
						p.topic, p.partition, s.name, cp.cut[i].next, tc.c.cfg.shutdownTimeout)
				}
				if p.isAbandoned() {
					return fmt.Errorf("partition %s/%d abandoned records in flight at its stop", p.topic, p.partition)
				}
			}
		}
		// The deferred sends of the records completed above the last
		// cycle's cuts, flushed into this transaction (txnCut.send).
		late := p.txn.sends.acks()
		for {
			ch := late.zero.wait()
			if late.n.Load() == 0 {
				break
			}
			select {
			case <-ch:
			case <-deadline.C:
				return fmt.Errorf("partition %s/%d: %d deferred sends were not acknowledged within %v of the cycle's start",
					p.topic, p.partition, late.n.Load(), tc.c.cfg.shutdownTimeout)
			}
		}
	}
	return nil
}

// abort undoes a cycle: the prepared checkpoints are released (their writes
// stay pending until the rewind drops them), the transaction is aborted,
// and every partition restarts at its last committed positions.
func (tc *txnCoordinator) abort(ctx context.Context, parts []*cyclePart, cause error) {
	tc.mu.Lock()
	tc.mu.aborts++
	aborts := tc.mu.aborts
	tc.mu.Unlock()
	tc.log.Warn("transaction aborted: every partition restarts from its last committed positions; nothing of the cycle is visible to read_committed readers",
		"err", cause, "partitions", len(parts), "consecutive_aborts", aborts)
	for _, cp := range parts {
		if cp.prep != nil {
			cp.prep.abort()
			cp.prep = nil
		}
		// The records above the cut whose sends wait for the cycle are
		// dropped with the epoch, and so is whatever its records in
		// flight send from now on (restartEpoch makes the new epoch's
		// sends direct): the rewind's stop would otherwise wait for them.
		cp.p.txn.sends.drop()
	}
	if err := tc.tx.Abort(ctx); err != nil {
		tc.log.Warn("aborting the transaction failed; the transaction coordinator aborts it at its timeout", "err", err)
	}
	// Stop every partition's epoch first: its records still in flight may
	// produce into the transaction opened after the abort, and that one is
	// aborted too before any partition restarts (stopEpoch).
	stopped := make([]bool, len(parts))
	for i, cp := range parts {
		stopped[i] = cp.p.stopEpoch()
	}
	if err := tc.tx.Abort(ctx); err != nil {
		tc.log.Warn("aborting what the stopping partitions sent after the abort failed; the transaction coordinator aborts it at its timeout", "err", err)
	}
	for i, cp := range parts {
		cp.leave = !stopped[i] || !cp.p.restartEpoch()
		if aborts >= maxConsecutiveAborts {
			cp.p.fail(fmt.Errorf("exactly-once: %d transactions in a row aborted, the last: %w", aborts, cause))
		}
	}
}

// resolve asks r for the outcome of the transaction whose Commit of offsets
// failed, within a shutdown timeout of its own (the cycle's may be spent).
func (tc *txnCoordinator) resolve(r CommitResolver, offsets []TxnOffset) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tc.c.cfg.shutdownTimeout)
	defer cancel()
	return r.ResolveCommit(ctx, offsets)
}

// unknown ends a cycle whose Commit failed and whose transaction's outcome
// the Transactor could not learn. A partition whose offset the transaction
// held is at the cycle's positions in memory, and the committed ones are
// either those or the previous cycle's: a rewind would repeat the cycle's
// outputs if the transaction committed, going on would lose them if it did
// not. So it is neither: its prepared checkpoint is released (the store
// keeps the previous cycle's state; the overlay is dropped when the
// partition closes), and it leaves the cycles and fails, committing nothing
// more — its next start resumes from the brokers' committed offsets and the
// changelog (ErrTxnOutcomeUnknown). A partition whose offset the
// transaction did not hold (nothing of it changed since its last commit)
// is at its committed positions either way: it goes on.
func (tc *txnCoordinator) unknown(ctx context.Context, parts []*cyclePart, cause error) {
	tc.log.Error("the transaction's commit failed and its outcome is unknown: the partitions it committed offsets for fail without rewinding, and restart from the brokers' committed offsets and the changelog",
		"err", cause)
	var failed []*cyclePart
	for _, cp := range parts {
		if cp.prep == nil || !cp.prep.changed {
			continue
		}
		cp.prep.abort()
		cp.prep = nil
		cp.err, cp.leave = cause, true
		failed = append(failed, cp)
	}
	// Whatever is still open (the resolver could not settle it) must not
	// commit with the next cycle's offsets.
	if err := tc.tx.Abort(ctx); err != nil {
		tc.log.Warn("aborting the transaction of unknown outcome failed; the transaction coordinator ends it at its timeout", "err", err)
	}
	for _, cp := range failed {
		cp.p.fail(cause)
	}
}

// txnPrepared is one partition's share of a cycle: its snapshot, prepared
// store checkpoint and commit.
type txnPrepared struct {
	p        *partitionRun
	cps      []commit.Checkpoint
	pc       PreparedCheckpoint // nil without a store
	clOffset int64
	changed  bool
	offset   int64
	metadata string
}

// prepareTxn is a partition's half of a cycle, once the records below its
// cut are drained: the positions (each stage's contiguous position, at
// most its cut: records above the cut belong to the next cycle; below the
// cut, the completed set must be exactly the prefix below the position —
// records completed above it would have their outputs in the transaction
// and be processed again after a restart; the offsets an earlier run
// completed above it are carried, see carriedAbove), the store checkpoint
// and its changelog records (appended inside the transaction), the commit
// metadata.
func (p *partitionRun) prepareTxn(ctx context.Context, tx Transactor, cut []cutPoint) (*txnPrepared, error) {
	cps := make([]commit.Checkpoint, len(p.stages))
	for i, s := range p.stages {
		s.mu.Lock()
		next, wm := s.mu.tracker.Position()
		above := 0
		if next >= cut[i].next {
			next, wm = cut[i].next, cut[i].wm
		}
		var carried []int64
		if i < len(p.txn.committed) {
			carried = carriedAbove(p.txn.committed[i].Above, next)
		}
		if next < cut[i].next {
			// A record below the cut was dropped (its record failed, or
			// the transaction did): whatever completed above it may be
			// below the cut, its outputs in the transaction — except the
			// carried offsets, completed by an earlier run.
			above = s.mu.tracker.CompletedAbove()
			for _, o := range carried {
				if o > next && !s.mu.tracker.PreCompleted(o) {
					above--
				}
			}
		}
		s.mu.Unlock()
		cps[i] = commit.Checkpoint{Stage: s.name, Next: next, Watermark: wm, Above: carried}
		s.noteProgress(next)
		if above > 0 {
			return nil, fmt.Errorf("partition %s/%d stage %q: %d records completed above the position %d (a record before them failed); their outputs may be in the transaction",
				p.topic, p.partition, s.name, above, next)
		}
	}
	pr := &txnPrepared{p: p, cps: cps, clOffset: p.clOffset}
	state := commit.State{Stages: cps, Changelog: commit.NoChangelog}
	// The tail decisions taken so far, the ones the records of this cycle
	// were released against among them (recorded at once in this mode).
	state.Idle, _ = p.gaps.forCommit(minNext(cps))
	if p.cs != nil {
		evict := EvictBefore(unixTime(cps[len(cps)-1].Watermark))
		pc, err := p.cs.PrepareCheckpoint(cps, evict)
		if err != nil {
			return nil, fmt.Errorf("partition %s/%d: prepare checkpoint: %w", p.topic, p.partition, err)
		}
		if recs := pc.Records(); len(recs) > 0 {
			end, err := tx.AppendChangelog(ctx, p.topic, p.partition, recs)
			if err != nil {
				pc.Abort()
				return nil, fmt.Errorf("partition %s/%d: %w (%d records): %w", p.topic, p.partition, errChangelogAppend, len(recs), err)
			}
			p.c.tc.appended.Add(int64(len(recs)))
			pr.clOffset = end
		}
		pr.pc = pc
		state.Changelog = pr.clOffset
	}
	var err error
	pr.offset, pr.metadata, pr.changed, err = p.mgr.NextState(state)
	if err != nil {
		pr.abort()
		return nil, fmt.Errorf("partition %s/%d: commit: %w", p.topic, p.partition, err)
	}
	return pr, nil
}

// carriedAbove is the part at or above next of the offsets the last
// committed cycle carried above a stage's position (from the restored
// checkpoint at first: the completed-above set of an at-least-once run).
// This run skips them (their records were processed and their outputs
// produced by the run that completed them), so every cycle carries them
// until its position passes them: a restart, or a rewind to the cycle,
// must skip them too. Nil when none is left.
func carriedAbove(committed []int64, next int64) []int64 {
	i, _ := slices.BinarySearch(committed, next)
	if i == len(committed) {
		return nil
	}
	return slices.Clone(committed[i:])
}

func (pr *txnPrepared) abort() {
	if pr.pc != nil {
		pr.pc.Abort()
		pr.pc = nil
	}
}

// persist is the cycle's end for one partition after the transaction
// committed: the store checkpoint (state, positions, changelog offset) is
// written, and the commit is recorded.
func (pr *txnPrepared) persist() {
	p := pr.p
	if pr.pc != nil {
		if err := pr.pc.Commit(pr.clOffset); err != nil {
			// Kafka has the checkpoint, the store does not: the next
			// assignment catches the store up from the changelog.
			p.fail(fmt.Errorf("persist the committed checkpoint: %w", err))
		}
		pr.pc = nil
	}
	p.clOffset = pr.clOffset
	p.txn.committed = pr.cps
	if !pr.changed {
		return
	}
	p.mgr.Committed(pr.offset, pr.metadata)
	p.committed.Store(pr.offset)
	p.commits.Add(1)
	if o := p.c.cfg.observer; o != nil {
		o.Committed(p.topic, p.partition, pr.offset, pr.metadata)
	}
}
