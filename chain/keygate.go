package chain

import (
	"hash/maphash"
	"math"
	"sync/atomic"
)

// keyGate is the follower side of the key-scoped gate (GateKey, DESIGN.md
// "The key-scoped gate") of one stage. The stage goroutine owns it, except moved
// and hasMoved, which the leader's completions write under the leader's mu.
//
// A record goes through two steps:
//
//  1. Admission, in offset order (admission): the stage waits until its
//     leader has *begun* everything the record's rule names — its read
//     frontier is past o + OffsetDistance and, for a record the stage
//     processes, its read stream time exceeds t + Lateness (that is, it has
//     read past q(t + Lateness)) — or until the leader is idle. Then the
//     stage computes stream time, begins the record in its tracker and
//     sequences it (Sequencer: dedup).
//  2. The key gate (offer, service): the record runs once the leader has
//     no pending record of its key at or below o + OffsetDistance (a′) and,
//     when processing, none whose stream time before it is ≤ t + Lateness,
//     i.e. none below q(t + Lateness) (b′) — the leader's keyTable answers
//     from the key's oldest pending record. Otherwise it waits in its key's
//     queue (one key's records stay in offset order); the leader hands the
//     key back when it moved far enough, and the stage serves it between
//     records and while it waits for anything else.
//
// Why admission waits for the leader's read frontier and not only for q to
// be known: every record the stage has begun then depends only on records
// its leader has already begun. A stop makes the stages stop beginning
// records, and every begun record of the leader finishes (by induction
// from the first stage, which has no gate), so the records waiting in the
// gate are released and finish too: the drain is bounded by the in-flight
// windows and the completed set ends contiguous, so a clean stop repeats
// nothing (I6) without offsets above the position in the metadata. See
// DESIGN.md "The key-scoped gate".
//
// That is exactly-once mode (and chain.WithoutCarriedOffsets). In at-least-once
// mode the gate is eager: there is no admission step; a record is begun
// when read and waits in the gate until the leader's read frontier makes
// its check known (front) as well; a stop abandons what cannot run
// (drainEager) and checkpoints carry the offsets completed above the
// position, closed under reads-from (DESIGN.md "Choices the rules leave open", item 7).
type keyGate struct {
	s, l   *stageRun
	queues map[uint64]gateQueue // key → records waiting, in offset order
	free   []*gated
	// size counts the records waiting (Stats; the drain's condition).
	size atomic.Int64
	// wake is notified when the leader put a key on moved.
	wake signal
	// moved is guarded by the leader's mu; hasMoved says it is not empty
	// (checked without the lock before every record and before blocking).
	moved, spare []uint64
	hasMoved     atomic.Bool
	// doomed: a record of this stage's leader (or of a stage before it)
	// was dropped because the open transaction failed (exactly-once mode,
	// ErrTransaction); the records waiting here may wait for it, which
	// never completes in this epoch, and the epoch is rewound anyway:
	// they are dropped (see doomFollowers).
	doomed atomic.Bool

	// eager: at-least-once mode without the admission step (see
	// admitKeyed): records are begun as they are read and wait here until
	// the leader's read frontier makes their rule's check known (front)
	// as well as for the leader's records of their key. A stop abandons
	// the records that cannot be released (drainEager); checkpoints carry
	// the offsets completed above the position instead of a drain to a
	// contiguous set (commit.Tracker.AppendCompletedAbove).
	eager bool
	// front holds the keys whose oldest waiting record waits for the
	// leader's read frontier; seenN, seenS is the frontier they were last
	// checked against. Owned by the stage goroutine.
	front        map[uint64]struct{}
	frontScratch []uint64
	seenN, seenS int64
}

type gateQueue struct{ head, tail *gated }

// gated is a begun record waiting in the key gate.
type gated struct {
	ev     Event
	stream int64 // S(o)
	kh     uint64
	act    gatedAct
	reason error // actDeadLetter
	accept bool  // the stage's filter accepted it (BeginInfo.Processing)
	want   want
	next   *gated
}

// gatedAct is what becomes of a begun record once it runs: the key gate
// keeps it with a gated record, and handle acts on the Sequencer's answer
// (stageRun.sequence) at once.
type gatedAct uint8

const (
	actProcess gatedAct = iota
	actSkip
	actDeadLetter
)

// want is what a record at offset o waits for at its leader: no pending
// record of its key with offset ≤ off or stream time before it ≤ s. idle:
// released because the log shows the leader idle after the record at off
// (gapLog; s is then unbounded).
type want struct {
	o, off, s int64
	idle      bool
}

// idleWant is what a record at o waits for when the log shows its leader
// idle after l ≥ o: every record of its key up to l.
func idleWant(o, l int64) want { return want{o: o, off: l, s: math.MinInt64, idle: true} }

func newKeyGate(s, l *stageRun) *keyGate {
	return &keyGate{s: s, l: l, queues: make(map[uint64]gateQueue), front: make(map[uint64]struct{})}
}

// movedLocked hands kh to the follower; the leader holds its mu. It reports
// that the follower must be woken.
func (g *keyGate) movedLocked(kh uint64) bool {
	g.moved = append(g.moved, kh)
	g.hasMoved.Store(true)
	return true
}

func (g *keyGate) newGated() *gated {
	if n := len(g.free); n > 0 {
		r := g.free[n-1]
		g.free = g.free[:n-1]
		return r
	}
	return new(gated)
}

func (g *keyGate) put(r *gated) {
	*r = gated{}
	g.free = append(g.free, r)
}

// keyHash is the key identity of the key-scoped gate (see keyTable).
func (p *partitionRun) keyHash(key []byte) uint64 {
	return maphash.Bytes(p.keySeed, key)
}
