package store

import (
	"bytes"
	"fmt"
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

// CheckpointAll persists the checkpoints of several partitions in one
// atomic, synced batch: each partition's part is exactly what its own
// Checkpoint(Checkpoints, EvictBefore) would write (the changelog offset
// dropped included), and either every part is persisted or none is (then
// every partition's writes stay pending, as after a failed Checkpoint). It
// costs one write and one sync where calling Checkpoint per partition costs
// one each: a loop that checkpoints every partition at the same instant
// (the micro-batch baseline of package bench/microbatch, after each batch)
// uses it.
//
// The partitions must be distinct and opened by the same DB or Memory.
// Their parts are prepared one after another, each holding its partition's
// checkpoint lock until the batch is written.
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
	if len(parts) == 0 {
		return nil
	}
	pcs := make([]*prepared, 0, len(parts))
	defer func() {
		for _, pc := range pcs {
			pc.release() // once applied, or with the writes still pending
		}
	}()
	for i, p := range parts {
		pc, err := p.prepareIn(items[i].Checkpoints, items[i].EvictBefore, false, func() batch { return &recordingBatch{} })
		if err != nil {
			return err // the parts prepared so far are released, unwritten
		}
		pc.seal(noChangelog)
		pcs = append(pcs, pc)
	}
	size := 0
	for _, pc := range pcs {
		size += pc.b.size()
	}
	b := parts[0].e.be.newBatchSized(size)
	for _, pc := range pcs {
		pc.b.(*recordingBatch).replay(b)
	}
	if err := b.commit(); err != nil {
		// Nothing was applied: every part's writes stay pending.
		return fmt.Errorf("store: checkpoint of %d partitions: %w", len(parts), err)
	}
	for _, pc := range pcs {
		if m, ok := pc.p.be.(*mirrored); ok {
			m.applyRecorded(pc.b.(*recordingBatch).ops)
		}
		pc.applied()
	}
	return nil
}

// recordingBatch records a part's writes; CheckpointAll replays every
// part's into one backend batch. Its own commit is never called.
type recordingBatch struct {
	ops []groupOp
}

type groupOp struct {
	kind     memOpKind
	key, val []byte // memDelRange: val is the end key
}

func (b *recordingBatch) set(key, value []byte) {
	v := make([]byte, len(value))
	copy(v, value)
	b.ops = append(b.ops, groupOp{kind: memSet, key: bytes.Clone(key), val: v})
}

func (b *recordingBatch) del(key []byte) {
	b.ops = append(b.ops, groupOp{kind: memDel, key: bytes.Clone(key)})
}

func (b *recordingBatch) delRange(lo, hi []byte) {
	b.ops = append(b.ops, groupOp{kind: memDelRange, key: bytes.Clone(lo), val: bytes.Clone(hi)})
}

func (b *recordingBatch) commit() error {
	return fmt.Errorf("%w: a CheckpointAll part is written with the group", ErrInvalid)
}

func (b *recordingBatch) commitNoSync() error { return b.commit() }

func (b *recordingBatch) discard() { b.ops = nil }

func (b *recordingBatch) size() int {
	n := 0
	for _, op := range b.ops {
		n += len(op.key) + len(op.val) + opOverhead
	}
	return n
}

// opOverhead is about what a batch adds to a write's key and value (kind,
// lengths).
const opOverhead = 8

// replay adds the recorded writes to to, in order.
func (b *recordingBatch) replay(to batch) {
	for _, op := range b.ops {
		switch op.kind {
		case memSet:
			to.set(op.key, op.val)
		case memDel:
			to.del(op.key)
		case memDelRange:
			to.delRange(op.key, op.val)
		}
	}
}
