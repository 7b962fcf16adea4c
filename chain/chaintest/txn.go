package chaintest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/differential-dev/differential/chain"
)

// Transactor is an in-memory chain.Transactor (UseTransactions): outputs,
// dead letters and changelog records of the open transaction are
// acknowledged at once but become visible — Tester.Outputs, Commits, the
// Changelog's read_committed view — only when the chain commits the
// transaction, together with its offsets; an abort drops them (the
// changelog keeps their offsets, skipped by readers, as Kafka does).
// FailCommits, LoseCommitResults, FailResolve and FailProduce inject the
// failures the chain must survive. It implements chain.CommitResolver.
type Transactor struct {
	t *Tester

	mu struct {
		sync.Mutex
		outputs []chain.Message
		open    bool
		// failed: the transaction cannot commit (a failed send).
		failed      error
		failCommits int
		loseResults int
		failResolve int
		resolved    Resolutions
		failProduce int
		failWhere   func(chain.Message) bool
		commits     int
		aborts      int
		beforeCmt   func()
		attempt     []chain.TxnOffset
		beforeAbort func()
		log         []Txn
	}
}

// Txn is one committed transaction: its outputs and dead letters, in the
// order they were sent, and its offsets.
type Txn struct {
	Outputs []chain.Message
	Offsets []chain.TxnOffset
}

// Resolutions counts a Transactor's ResolveCommit answers.
type Resolutions struct {
	Committed, NotCommitted, Unknown int
}

var (
	_ chain.Transactor     = (*Transactor)(nil)
	_ chain.CommitResolver = (*Transactor)(nil)
)

// errInjected is the cause of the failures a test injects.
var errInjected = errors.New("chaintest: injected transaction failure")

// UseTransactions makes every chain the tester starts run in exactly-once
// mode (chain.WithExactlyOnce) with the returned in-memory Transactor,
// instead of the tester's at-least-once producer and committer. Combine it
// with UseChangelog for a chain with state. Call it before the first Start.
func (t *Tester) UseTransactions() *Transactor {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.txn == nil {
		t.mu.txn = &Transactor{t: t}
	}
	return t.mu.txn
}

// FailCommits makes the next n Commit calls fail (as a transaction
// coordinator that refuses EndTxn, or a TxnOffsetCommit refused for a stale
// generation): nothing of the transaction becomes visible.
func (x *Transactor) FailCommits(n int) {
	x.mu.Lock()
	x.mu.failCommits = n
	x.mu.Unlock()
}

// LoseCommitResults makes the next n Commit calls that commit something
// take effect — outputs, changelog records and offsets become visible — and
// then return an error, as when the connection is lost on EndTxn's response
// after the transaction coordinator wrote its commit decision.
func (x *Transactor) LoseCommitResults(n int) {
	x.mu.Lock()
	x.mu.loseResults = n
	x.mu.Unlock()
}

// FailResolve makes the next n ResolveCommit calls unable to learn the
// outcome, as an offset fetch that keeps failing: each settles the
// transaction as usual, then waits until its context ends and returns an
// error.
func (x *Transactor) FailResolve(n int) {
	x.mu.Lock()
	x.mu.failResolve = n
	x.mu.Unlock()
}

// Resolved returns how ResolveCommit answered so far.
func (x *Transactor) Resolved() Resolutions {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mu.resolved
}

// FailProduce makes the next n Produce calls fail with an error wrapping
// chain.ErrTransaction (a send that failed inside the transaction); the
// transaction can then no longer commit.
func (x *Transactor) FailProduce(n int) {
	x.mu.Lock()
	x.mu.failProduce, x.mu.failWhere = n, nil
	x.mu.Unlock()
}

// FailProduceWhere makes the next n Produce calls that send a message for
// which match is true fail like FailProduce's.
func (x *Transactor) FailProduceWhere(n int, match func(chain.Message) bool) {
	x.mu.Lock()
	x.mu.failProduce, x.mu.failWhere = n, match
	x.mu.Unlock()
}

// BeforeCommit installs fn, called at the start of every Commit (outside
// the transactor's lock); nil removes it.
func (x *Transactor) BeforeCommit(fn func()) {
	x.mu.Lock()
	x.mu.beforeCmt = fn
	x.mu.Unlock()
}

// BeforeAbort installs fn, called at the start of every Abort (outside
// the transactor's lock); nil removes it. The chain aborts twice per
// aborted cycle, the second time once every partition's stages have
// stopped and before any restarts at its committed positions.
// ResolveCommit's own abort of a transaction left open by a failed Commit
// does not call it.
func (x *Transactor) BeforeAbort(fn func()) {
	x.mu.Lock()
	x.mu.beforeAbort = fn
	x.mu.Unlock()
}

// Attempted returns the offsets of the latest Commit call (recorded before
// its BeforeCommit hook runs, so the hook can read them), whether or not it
// committed.
func (x *Transactor) Attempted() []chain.TxnOffset {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.mu.attempt)
}

// Counts returns how many transactions committed and aborted (an Abort
// with no transaction open counts for nothing).
func (x *Transactor) Counts() (commits, aborts int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mu.commits, x.mu.aborts
}

// Produce implements chain.Producer inside the open transaction, with the
// tester's acknowledgement mode and size limit.
func (x *Transactor) Produce(_ context.Context, msgs []chain.Message, done func(error)) {
	t := x.t
	cp := make([]chain.Message, len(msgs))
	copy(cp, msgs)
	t.mu.Lock()
	limit, mode := t.mu.maxSize, t.mu.acks
	t.mu.Unlock()
	if limit > 0 {
		for i := range cp {
			if n := messageSize(&cp[i]); n > limit {
				done(fmt.Errorf("chaintest: message to %s: %w: %d bytes > %d", cp[i].Topic, chain.ErrMessageTooLarge, n, limit))
				return
			}
		}
	}
	x.mu.Lock()
	x.mu.open = true
	if x.mu.failProduce > 0 && (x.mu.failWhere == nil || slices.ContainsFunc(cp, x.mu.failWhere)) {
		x.mu.failProduce--
		err := fmt.Errorf("chaintest: produce: %w: %w", chain.ErrTransaction, errInjected)
		if x.mu.failed == nil {
			x.mu.failed = err
		}
		x.mu.Unlock()
		done(err)
		return
	}
	x.mu.outputs = append(x.mu.outputs, cp...)
	x.mu.Unlock()
	switch mode {
	case AckHold:
		t.mu.Lock()
		t.mu.held = append(t.mu.held, done)
		t.mu.Unlock()
	case AckAsync:
		go done(nil)
	default:
		done(nil)
	}
}

// AppendChangelog implements chain.Transactor on the tester's changelog
// (UseChangelog).
func (x *Transactor) AppendChangelog(_ context.Context, _ string, partition int32, recs []chain.ChangelogRecord) (int64, error) {
	x.t.mu.Lock()
	cl := x.t.mu.changelog
	x.t.mu.Unlock()
	if cl == nil {
		return 0, errors.New("chaintest: AppendChangelog without UseChangelog")
	}
	x.mu.Lock()
	x.mu.open = true
	x.mu.Unlock()
	return cl.appendTxn(partition, recs), nil
}

// Commit implements chain.Transactor: the transaction's outputs, changelog
// records and offsets become visible at once.
func (x *Transactor) Commit(_ context.Context, offsets []chain.TxnOffset) error {
	x.mu.Lock()
	hook := x.mu.beforeCmt
	x.mu.attempt = slices.Clone(offsets)
	x.mu.Unlock()
	if hook != nil {
		hook()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.mu.open && len(offsets) == 0 {
		return nil
	}
	if x.mu.failed != nil {
		return x.mu.failed
	}
	if x.mu.failCommits > 0 {
		x.mu.failCommits--
		return fmt.Errorf("chaintest: commit: %w: %w", chain.ErrTransaction, errInjected)
	}
	t := x.t
	t.mu.Lock()
	for _, o := range offsets {
		prev := t.mu.commits[o.Partition]
		if n := len(prev); n > 0 && o.Offset < prev[n-1].Offset {
			t.mu.Unlock()
			return fmt.Errorf("chaintest: commit %d below previous %d", o.Offset, prev[n-1].Offset)
		}
		t.mu.commits[o.Partition] = append(prev, Commit{o.Offset, o.Metadata})
	}
	t.keepLocked(x.mu.outputs)
	cl := t.mu.changelog
	t.mu.Unlock()
	if cl != nil {
		cl.endTxn(true)
	}
	x.mu.log = append(x.mu.log, Txn{Outputs: x.mu.outputs, Offsets: slices.Clone(offsets)})
	x.mu.outputs = nil
	x.mu.open = false
	x.mu.commits++
	t.changed.notify()
	if x.mu.loseResults > 0 {
		x.mu.loseResults--
		return fmt.Errorf("chaintest: commit: the response was lost (the transaction committed): %w", errInjected)
	}
	return nil
}

// ResolveCommit implements chain.CommitResolver: it aborts the transaction
// if it is still open (a failed Commit leaves it so), then compares offsets
// with the partitions' last commits.
func (x *Transactor) ResolveCommit(ctx context.Context, offsets []chain.TxnOffset) (bool, error) {
	x.mu.Lock()
	open := x.mu.open || x.mu.failed != nil
	fail := x.mu.failResolve > 0
	if fail {
		x.mu.failResolve--
	}
	x.mu.Unlock()
	if open {
		x.abort()
	}
	if fail {
		<-ctx.Done()
		x.mu.Lock()
		x.mu.resolved.Unknown++
		x.mu.Unlock()
		return false, fmt.Errorf("chaintest: read the committed offsets: %w: %w", errInjected, ctx.Err())
	}
	t := x.t
	t.mu.Lock()
	match := 0
	for _, o := range offsets {
		cs := t.mu.commits[o.Partition]
		if n := len(cs); n > 0 && cs[n-1] == (Commit{o.Offset, o.Metadata}) {
			match++
		}
	}
	t.mu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	switch match {
	case len(offsets):
		x.mu.resolved.Committed++
		return true, nil
	case 0:
		x.mu.resolved.NotCommitted++
		return false, nil
	}
	x.mu.resolved.Unknown++
	return false, fmt.Errorf("chaintest: %d of %d partitions hold the transaction's offsets", match, len(offsets))
}

// Transactions returns the committed transactions, oldest first.
func (x *Transactor) Transactions() []Txn {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.mu.log)
}

// Abort implements chain.Transactor.
func (x *Transactor) Abort(context.Context) error {
	x.mu.Lock()
	hook := x.mu.beforeAbort
	x.mu.Unlock()
	if hook != nil {
		hook()
	}
	x.abort()
	return nil
}

// abort is Abort without its hook.
func (x *Transactor) abort() {
	x.mu.Lock()
	if x.mu.open || x.mu.failed != nil {
		x.mu.aborts++ // a transaction was open: it is aborted
	}
	x.mu.outputs = nil
	x.mu.open = false
	x.mu.failed = nil
	x.mu.Unlock()
	x.t.mu.Lock()
	cl := x.t.mu.changelog
	x.t.mu.Unlock()
	if cl != nil {
		cl.endTxn(false)
	}
	x.t.changed.notify()
}

// Pending returns the outputs of the open transaction (not yet visible).
func (x *Transactor) Pending() []chain.Message {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.mu.outputs)
}
