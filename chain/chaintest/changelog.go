package chaintest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/store"
)

// Changelog is an in-memory chain.Changelog: one append-only list of
// records per partition, kept across Stop and Start. Safe for concurrent
// use.
type Changelog struct {
	mu struct {
		sync.Mutex
		parts map[int32][]chain.ChangelogRecord
		// failAppends, when > 0, makes that many next Appends fail after
		// writing half of their records.
		failAppends  int
		beforeAppend func(partition int32, recs []chain.ChangelogRecord)
		retention    time.Duration
		// txn marks the records of transactions (Transactor) that did not
		// commit: pending while the transaction is open, aborted after.
		// Read skips both, as a read_committed reader does.
		txn map[int32]map[int64]txnStatus
	}
}

type txnStatus uint8

const (
	txnPending txnStatus = iota + 1
	txnAborted
)

var (
	_ chain.Changelog          = (*Changelog)(nil)
	_ chain.TombstoneRetention = (*Changelog)(nil)
)

// SetTombstoneRetention sets what TombstoneRetention reports (as Kafka's
// delete.retention.ms would); 0, the default: tombstones are kept for ever.
// The in-memory changelog never drops records itself.
func (c *Changelog) SetTombstoneRetention(d time.Duration) {
	c.mu.Lock()
	c.mu.retention = d
	c.mu.Unlock()
}

// TombstoneRetention implements chain.TombstoneRetention.
func (c *Changelog) TombstoneRetention() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.retention
}

// NewChangelog returns an empty in-memory changelog.
func NewChangelog() *Changelog {
	c := &Changelog{}
	c.mu.parts = map[int32][]chain.ChangelogRecord{}
	return c
}

// Partition implements chain.Changelog.
func (c *Changelog) Partition(_ string, p int32) (chain.ChangelogPartition, error) {
	return &changelogPartition{c: c, p: p}, nil
}

// Records returns a copy of partition p's changelog, in offset order (the
// records of transactions that did not commit included).
func (c *Changelog) Records(p int32) []chain.ChangelogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.parts[p])
}

// CommittedRecords returns what a read_committed reader sees of partition
// p: Records without those of pending or aborted transactions.
func (c *Changelog) CommittedRecords(p int32) []chain.ChangelogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []chain.ChangelogRecord
	for _, r := range c.mu.parts[p] {
		if c.mu.txn[p][r.Offset] == 0 {
			out = append(out, r)
		}
	}
	return out
}

// appendTxn appends recs to partition p as pending records of an open
// transaction and returns their offsets' end.
func (c *Changelog) appendTxn(p int32, recs []chain.ChangelogRecord) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &changelogPartition{c: c, p: p}
	next := l.endLocked()
	if c.mu.txn == nil {
		c.mu.txn = map[int32]map[int64]txnStatus{}
	}
	if c.mu.txn[p] == nil {
		c.mu.txn[p] = map[int64]txnStatus{}
	}
	for _, r := range recs {
		c.mu.parts[p] = append(c.mu.parts[p], chain.ChangelogRecord{Offset: next, Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)})
		c.mu.txn[p][next] = txnPending
		next++
	}
	return next
}

// endTxn commits or aborts every pending record.
func (c *Changelog) endTxn(commit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.mu.txn {
		for off, st := range m {
			if st != txnPending {
				continue
			}
			if commit {
				delete(m, off)
			} else {
				m[off] = txnAborted
			}
		}
	}
}

// FailAppends makes the next n appends fail after writing the first half
// of their records, as a broker failure in the middle of a produce would.
func (c *Changelog) FailAppends(n int) {
	c.mu.Lock()
	c.mu.failAppends = n
	c.mu.Unlock()
}

// BeforeAppend installs fn, called at the start of every Append (outside
// the changelog's lock: it may block, to hold a checkpoint at its append).
// nil removes it.
func (c *Changelog) BeforeAppend(fn func(partition int32, recs []chain.ChangelogRecord)) {
	c.mu.Lock()
	c.mu.beforeAppend = fn
	c.mu.Unlock()
}

// Compact drops every record of partition p that a later record of the
// same key supersedes, keeping offsets (like Kafka's log cleaner).
func (c *Changelog) Compact(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs := c.mu.parts[p]
	last := map[string]int{}
	for i, r := range recs {
		last[string(r.Key)] = i
	}
	out := recs[:0:0]
	for i, r := range recs {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	c.mu.parts[p] = out
}

type changelogPartition struct {
	c *Changelog
	p int32
}

func (l *changelogPartition) endLocked() int64 {
	recs := l.c.mu.parts[l.p]
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Offset + 1
}

func (l *changelogPartition) End(context.Context) (int64, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.endLocked(), nil
}

// Read hands over copies, in batches of at most 100 records.
func (l *changelogPartition) Read(ctx context.Context, from, to int64, fn func([]chain.ChangelogRecord) error) error {
	l.c.mu.Lock()
	if end := l.endLocked(); to > end {
		l.c.mu.Unlock()
		return fmt.Errorf("chaintest: changelog partition %d: reading up to %d, but it ends at %d", l.p, to, end)
	}
	var recs []chain.ChangelogRecord
	for _, r := range l.c.mu.parts[l.p] {
		if l.c.mu.txn[l.p][r.Offset] != 0 {
			continue // not committed (read_committed)
		}
		if r.Offset >= from && r.Offset < to {
			recs = append(recs, chain.ChangelogRecord{Offset: r.Offset, Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)})
		}
	}
	l.c.mu.Unlock()
	for len(recs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(recs), 100)
		if err := fn(recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// Append copies the records.
func (l *changelogPartition) Append(_ context.Context, recs []chain.ChangelogRecord) (int64, error) {
	l.c.mu.Lock()
	hook := l.c.mu.beforeAppend
	l.c.mu.Unlock()
	if hook != nil {
		hook(l.p, recs)
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	n := len(recs)
	fail := l.c.mu.failAppends > 0
	if fail {
		l.c.mu.failAppends--
		n /= 2
	}
	next := l.endLocked()
	for _, r := range recs[:n] {
		l.c.mu.parts[l.p] = append(l.c.mu.parts[l.p], chain.ChangelogRecord{Offset: next, Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)})
		next++
	}
	if fail {
		return 0, fmt.Errorf("chaintest: injected changelog append failure after %d of %d records", n, len(recs))
	}
	return next, nil
}

func (l *changelogPartition) Close() error { return nil }

// UseChangelog makes the tester simulate a fleet whose state follows its
// partitions: every chain it starts gets the tester's in-memory Changelog
// (chain.WithChangelog) and the local store of the instance it runs on
// (chain.WithStore, overriding one given to New). Start runs on instance
// "a"; StartOn and Move pick another. Call it before the first Start.
func (t *Tester) UseChangelog() *Changelog {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.changelog == nil {
		t.mu.changelog = NewChangelog()
		t.mu.instances = map[string]*store.Memory{}
		t.mu.instance = "a"
	}
	return t.mu.changelog
}

// Instance returns the local store of a simulated instance, creating an
// empty one for a new name (UseChangelog).
func (t *Tester) Instance(name string) *store.Memory {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.instanceLocked(name)
}

func (t *Tester) instanceLocked(name string) *store.Memory {
	s, ok := t.mu.instances[name]
	if !ok {
		s = store.NewMemory()
		t.mu.instances[name] = s
	}
	return s
}

// StartOn starts the chain over the partitions on the named simulated
// instance (UseChangelog): its own local store — empty the first time the
// name is used, as it was left otherwise — and the shared changelog.
func (t *Tester) StartOn(instance string, partitions ...int32) {
	t.tb.Helper()
	t.mu.Lock()
	if t.mu.changelog == nil {
		t.mu.Unlock()
		t.tb.Fatalf("chaintest: StartOn needs UseChangelog")
	}
	t.mu.instance = instance
	t.mu.Unlock()
	t.Start(partitions...)
}

// Move stops the chain cleanly (drain, final commit) and starts the
// partitions on another simulated instance, as a rebalance that moves them
// would: the new instance's stages resume at the committed positions, with
// the state restored from the changelog. It returns Stop's error.
func (t *Tester) Move(instance string, partitions ...int32) error {
	t.tb.Helper()
	err := t.Stop()
	t.StartOn(instance, partitions...)
	return err
}

// changelogOptions are the options UseChangelog adds to every chain.
func (t *Tester) changelogOptions() []chain.Option {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.changelog == nil {
		return nil
	}
	return []chain.Option{chain.WithStore(t.instanceLocked(t.mu.instance)), chain.WithChangelog(t.mu.changelog)}
}
