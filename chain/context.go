package chain

import (
	"errors"
	"math"
	"time"
)

// Context is what a processor gets for one record: where the record is, the
// stream time before it, the partition's state, and a way to emit outputs.
// A Context is valid only during the Process (or Sequence) call it was
// passed to; it is reused afterwards.
type Context struct {
	topic      string
	partition  int32
	stage      string
	offset     int64
	streamTime time.Time
	asOf       int64 // Horizon; 0: none
	evictWM    func() time.Time
	st         boundState
	out        []Message
}

// Topic is the input topic.
func (c *Context) Topic() string { return c.topic }

// Partition is the input partition.
func (c *Context) Partition() int32 { return c.partition }

// Stage is the name of the stage running the processor.
func (c *Context) Stage() string { return c.stage }

// Offset is the offset of the record being processed.
func (c *Context) Offset() int64 { return c.offset }

// StreamTime is S(o) of DESIGN.md "Attribution rules": the largest event time among the valid
// records of the partition at offsets below this record (zero if none).
func (c *Context) StreamTime() time.Time { return c.streamTime }

// Horizon is the offset the record is processed as of, at a follower
// stage: the smallest position of its leader that the gate's rule needs,
// max(Offset + OffsetDistance + 1, q(EventTime + Lateness)) with q(x) the
// first offset whose stream time exceeds x (rule (a) alone for a record
// the stage does not process; per key under GateKey, the same bound) — or
// L+1 when that is smaller, the log showing the leader idle after a record
// L ≥ Offset (DESIGN.md "Idle release": the next record's Kafka timestamp
// is more than the idle timeout after L's, or L was the last record and
// the log's end was confirmed after that). It is math.MaxInt64 at the
// first stage.
//
// Unless the chain has WithAsOfReads(false), the follower's state reads
// (State().Get, Scan, ScanReverse) are made as of it: the writes of earlier stages for records at offsets ≥ Horizon are
// invisible (StageState.GetAsOf), so a processor sees exactly its leaders'
// writes of records below Horizon, every time the log is processed — live,
// after a restart or a rewind, on a backlog — however far its leaders had
// run when it ran. Below Horizon, the writes the gate's rule names (all of
// them under GatePartition; those of the record's key under GateKey) are
// complete. A processor that keeps leader data outside the state (or wants
// to compare offsets itself, like the attribution rules) applies the same
// bound: entries its leaders wrote at offsets ≥ Horizon must not influence
// the record.
func (c *Context) Horizon() int64 {
	if c.asOf == 0 {
		return math.MaxInt64
	}
	return c.asOf
}

// EvictionWatermark is a lower bound of the stream time at the position of the
// chain's slowest stage: no stage will process a record whose StreamTime is
// below it any more. State that no rule can use at that time may be dropped.
func (c *Context) EvictionWatermark() time.Time {
	if c.evictWM == nil {
		return time.Time{}
	}
	return c.evictWM()
}

// State is the partition's window state, with writes tagged by this record
// (persisted atomically with the stage position that covers it, DESIGN I4).
func (c *Context) State() State { return &c.st }

// Emit queues an output record. Outputs are produced after Process returns
// without error, and the record is complete only when Kafka acknowledged
// every one of them (DESIGN I5). Outputs of a failed attempt are discarded.
func (c *Context) Emit(m Message) { c.out = append(c.out, m) }

// Emitted returns the outputs queued so far: for tests of processors, and
// for drivers that produce them themselves (NewContext).
func (c *Context) Emitted() []Message { return c.out }

// ErrNoStore is returned by State operations when the chain has no Store.
var ErrNoStore = errors.New("chain: no state store configured (use WithStore)")

type boundState struct {
	ss     StageState
	offset int64
	// asOf is the record's horizon (Context.Horizon); 0: none, the reads
	// see every write (always, with plain).
	asOf  int64
	plain bool
	// tc counts the writes of an exactly-once chain's open cycle (nil
	// otherwise).
	tc *txnCoordinator
	// foreign is the other stages' Private prefixes (nil: none).
	foreign *foreignKeys
}

func (b *boundState) Get(key []byte) ([]byte, bool, error) {
	if b.ss == nil {
		return nil, false, ErrNoStore
	}
	if err := b.foreign.key(key); err != nil {
		return nil, false, err
	}
	if b.asOf != 0 {
		return b.ss.GetAsOf(b.asOf, key)
	}
	return b.ss.Get(key)
}

func (b *boundState) Set(key, value []byte, expires time.Time) error {
	if b.ss == nil {
		return ErrNoStore
	}
	if err := b.foreign.key(key); err != nil {
		return err
	}
	if b.tc != nil {
		b.tc.noteWrite()
	}
	return b.ss.Set(b.offset, key, value, expires)
}

func (b *boundState) Delete(key []byte) error {
	if b.ss == nil {
		return ErrNoStore
	}
	if err := b.foreign.key(key); err != nil {
		return err
	}
	if b.tc != nil {
		b.tc.noteWrite()
	}
	return b.ss.Delete(b.offset, key)
}

func (b *boundState) Scan(lo, hi []byte, fn func(key, value []byte) bool) error {
	if b.ss == nil {
		return ErrNoStore
	}
	if err := b.foreign.span(lo, hi); err != nil {
		return err
	}
	if b.asOf != 0 {
		return b.ss.ScanAsOf(b.asOf, lo, hi, false, fn)
	}
	return b.ss.Scan(lo, hi, fn)
}

func (b *boundState) ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error {
	if b.ss == nil {
		return ErrNoStore
	}
	if err := b.foreign.span(lo, hi); err != nil {
		return err
	}
	if b.asOf != 0 {
		return b.ss.ScanAsOf(b.asOf, lo, hi, true, fn)
	}
	return b.ss.ScanReverse(lo, hi, fn)
}

// ContextOptions describes a Context made outside a running chain: for
// calling a Processor directly (unit tests of processors) or from another
// driver of the same processors (the micro-batch baseline).
type ContextOptions struct {
	Topic      string
	Partition  int32
	Stage      string
	Offset     int64
	StreamTime time.Time
	// Horizon is returned by Context.Horizon; 0 means none
	// (math.MaxInt64).
	Horizon int64
	// EvictionWatermark is returned by Context.EvictionWatermark.
	EvictionWatermark time.Time
	// State is the stage's state handle (e.g. from a store's PartitionStore);
	// nil gives ErrNoStore on state access.
	State StageState
}

// NewContext returns a Context for one call of a Processor (or Sequencer)
// on the record at o.Offset; Emitted returns what it emitted.
func NewContext(o ContextOptions) *Context {
	wm := o.EvictionWatermark
	return &Context{
		topic:      o.Topic,
		partition:  o.Partition,
		stage:      o.Stage,
		offset:     o.Offset,
		streamTime: o.StreamTime,
		asOf:       max(o.Horizon, 0),
		evictWM:    func() time.Time { return wm },
		st:         boundState{ss: o.State, offset: o.Offset, asOf: max(o.Horizon, 0)},
	}
}

// EvictBefore is the eviction bound of a checkpoint whose slowest stage has
// watermark wm: state entries expiring at or before it — strictly before
// the watermark — can no longer be used by any rule, since no stage will
// process a record whose stream time is below wm again. Zero (evict
// nothing) when wm is zero.
func EvictBefore(wm time.Time) time.Time {
	if wm.IsZero() {
		return time.Time{}
	}
	return wm.Add(-time.Nanosecond)
}

// setHorizon sets the record's horizon (0: none) for Horizon and the
// state's reads.
func (c *Context) setHorizon(h int64) {
	c.asOf = h
	if !c.st.plain {
		c.st.asOf = h
	}
}

// reset prepares a reused Context for the record at offset o.
func (c *Context) reset(o int64, streamTime time.Time) {
	c.offset = o
	c.streamTime = streamTime
	c.asOf = 0
	c.st.offset = o
	c.st.asOf = 0
	clear(c.out)
	c.out = c.out[:0]
}
