package store

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// PartitionCheckpoint is one partition's part of CheckpointAll: what its
// PartitionStore.Checkpoint would be called with.
type PartitionCheckpoint struct {
	Store       chain.PartitionStore
	Checkpoints []commit.Checkpoint
	EvictBefore time.Time
}

// errGroupAborted is what the other partitions of a CheckpointAll return
// when one of them could not prepare its part.
var errGroupAborted = errors.New("another partition of the group failed; nothing was persisted")

// CheckpointAll persists the checkpoints of several partitions in one
// atomic, synced batch: each partition's part is exactly what its own
// Checkpoint(Checkpoints, EvictBefore) would write, and either every part
// is persisted or none is (then every partition's writes stay pending, as
// after a failed Checkpoint). It costs one write and one sync where calling
// Checkpoint per partition costs one each: a loop that checkpoints every
// partition at the same instant (the micro-batch baseline of package
// bench/microbatch, after each batch) uses it.
//
// The partitions must be distinct and opened by the same DB or Memory. The
// parts are prepared concurrently, one goroutine per partition.
func CheckpointAll(items []PartitionCheckpoint) error {
	parts := make([]*partitionStore, len(items))
	for i, it := range items {
		p, ok := it.Store.(*partitionStore)
		switch {
		case !ok:
			return fmt.Errorf("%w: CheckpointAll: item %d is a %T, not a partition of a store of this package", ErrInvalid, i, it.Store)
		case i > 0 && p.e != parts[0].e:
			return fmt.Errorf("%w: CheckpointAll: %s/%d belongs to another store than %s/%d", ErrInvalid, p.topic, p.partition, parts[0].topic, parts[0].partition)
		}
		for _, q := range parts[:i] {
			if q == p {
				return fmt.Errorf("%w: CheckpointAll: %s/%d appears twice", ErrInvalid, p.topic, p.partition)
			}
		}
		parts[i] = p
	}
	switch len(parts) {
	case 0:
		return nil
	case 1:
		return parts[0].Checkpoint(items[0].Checkpoints, items[0].EvictBefore)
	}
	g := &checkpointGroup{be: parts[0].be, left: len(parts), done: make(chan struct{})}
	g.members = make([]*groupBatch, len(parts))
	for i := range g.members {
		g.members[i] = &groupBatch{g: g}
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		m := g.members[i]
		wg.Go(func() {
			errs[i] = p.checkpoint(items[i].Checkpoints, items[i].EvictBefore, func() batch { return m })
			// A part that failed before it took its batch leaves the group
			// here (and aborts it); one that committed or discarded it
			// already left.
			m.discard()
		})
	}
	wg.Wait()
	if g.aborted {
		// Report the parts' own errors, not the aborts they caused.
		var own []error
		for _, err := range errs {
			if err != nil && !errors.Is(err, errGroupAborted) {
				own = append(own, err)
			}
		}
		return errors.Join(own...)
	}
	return errors.Join(errs...)
}

// checkpointGroup is one CheckpointAll: every member records its part's
// writes in its groupBatch; when the last member arrives, the writes of all
// go into one backend batch, committed once, unless a member failed.
type checkpointGroup struct {
	be      backend
	members []*groupBatch

	mu      sync.Mutex
	left    int  // members not yet arrived
	aborted bool // a member arrived without committing

	done chan struct{} // closed once err is set
	err  error
}

// arrive notes that b's member committed (ok) or gave up its part; the last
// one to arrive writes the group's batch.
func (g *checkpointGroup) arrive(b *groupBatch, ok bool) {
	g.mu.Lock()
	if b.arrived {
		g.mu.Unlock()
		return
	}
	b.arrived = true
	if !ok {
		g.aborted = true
	}
	g.left--
	last := g.left == 0
	g.mu.Unlock()
	if !last {
		return
	}
	if g.aborted {
		g.err = errGroupAborted
	} else {
		wb := g.be.newBatch()
		for _, m := range g.members {
			for _, op := range m.ops {
				switch op.kind {
				case memSet:
					wb.set(op.key, op.val)
				case memDel:
					wb.del(op.key)
				case memDelRange:
					wb.delRange(op.key, op.val)
				}
			}
		}
		g.err = wb.commit()
	}
	close(g.done)
}

// groupBatch is one member's batch: it records the writes; commit waits for
// the group's one commit and returns its result.
type groupBatch struct {
	g       *checkpointGroup
	ops     []groupOp
	arrived bool // guarded by g.mu
}

type groupOp struct {
	kind     memOpKind
	key, val []byte // memDelRange: val is the end key
}

func (b *groupBatch) set(key, value []byte) {
	v := make([]byte, len(value))
	copy(v, value)
	b.ops = append(b.ops, groupOp{kind: memSet, key: bytes.Clone(key), val: v})
}

func (b *groupBatch) del(key []byte) {
	b.ops = append(b.ops, groupOp{kind: memDel, key: bytes.Clone(key)})
}

func (b *groupBatch) delRange(lo, hi []byte) {
	b.ops = append(b.ops, groupOp{kind: memDelRange, key: bytes.Clone(lo), val: bytes.Clone(hi)})
}

func (b *groupBatch) commit() error {
	b.g.arrive(b, true)
	<-b.g.done
	return b.g.err
}

func (b *groupBatch) discard() { b.g.arrive(b, false) }
