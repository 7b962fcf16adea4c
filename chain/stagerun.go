package chain

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/commit"
)

const (
	modeBuffered int32 = iota
	modePolling
)

// stageRun is one stage of one partition. Its fields come in four groups:
// set while the partition builds its stages and read-only once their
// goroutines run; published for other goroutines, read lock-free
// (atomics, the sequence-locked checkpoints, signals); guarded by mu —
// completions arrive from any goroutine (workers, producer
// acknowledgements), the commit loop and the transaction's cycles read
// the tracker; and owned by the stage's goroutine (loop), which alone
// reads and writes them.
type stageRun struct {
	// Set at construction (newStageRun; disp and work by startWorkers,
	// before the loop starts), read-only after.
	p      *partitionRun
	idx    int
	name   string
	st     Stage
	seq    Sequencer
	leader *stageRun
	state  StageState
	retry  RetryPolicy
	// The key-scoped gate. kg is set when this stage itself has GateKey.
	// keys is set when this stage's follower has GateKey (by the
	// follower's construction): its records begun and not completed, per
	// key; the table is guarded by mu.
	kg   *keyGate
	keys *keyTable
	// cut is how the stage's records meet the commit cycles of its mode
	// (txncut.go): at-least-once, or exactly-once's cuts.
	cut cycleCut
	// direct: handle may run an accepted record on the stage goroutine
	// before beginning it in the tracker (run's unbegun path), since
	// nothing else registers it: no Sequencer, no key-parallel workers, no
	// key table or key gate, at-least-once mode. Set by startWorkers, when
	// disp and keys are known.
	direct bool
	// carry: checkpoints carry the offsets completed above the position
	// (at-least-once mode with a span that fits the metadata).
	carry bool
	// inPlace: the stage reads the handoff buffer's slots in place
	// (Ring.View) instead of copying them into batch — the first stage of
	// a one-stage chain, which no other stage reads behind.
	inPlace bool
	// loopDone is closed when the stage's loop returned (it begins no
	// more records).
	loopDone chan struct{}
	disp     *dispatcher
	// work is the processors' and producer's context: it outlives a stop
	// until the shutdown timeout abandons the records still in flight.
	work context.Context

	// cp is the published checkpoint, read lock-free by the follower's
	// gate, the commit loop and Stats; stored under mu (see complete).
	cp published
	// progress is notified whenever the position advances.
	progress signal
	// rd is, when keys is set, the read frontier (every offset below
	// rd.next is begun, rd.wm = S(rd.next)), published by the stage
	// goroutine after every begin; readSig is notified with it.
	rd      published
	readSig signal
	// outstanding counts records begun and neither completed nor dropped;
	// drained is notified when it may have reached zero (and, in
	// exactly-once mode, when the cut's pend reached zero).
	outstanding atomic.Int64
	drained     signal
	// readPos is the cursor as of the stage's last read of a batch: the
	// stage will never read below it again. The first stage discards what
	// every stage has passed (partitionRun.discardRead).
	readPos atomic.Int64
	// readMoved is notified after readPos moves (the first stage's pace
	// waits on it).
	readMoved signal

	mode                                              atomic.Int32
	switches, processed, skipped, dlq, retries, idles atomic.Int64
	lastNext                                          atomic.Int64 // position at the last progress note
	lastProgress                                      atomic.Int64 // unix nanos of the last observed advance

	mu struct {
		sync.Mutex
		tracker *commit.Tracker
		// The cut's counters (txnCut) are guarded by mu too.
		// keep: without carry (WithoutCarriedOffsets), the restored
		// offsets above the position (pre) that checkpoints still carry,
		// until the position passes them.
		keep []int64
	}

	// Owned by the stage goroutine.
	cursor int64
	stream int64 // S(cursor): largest valid event time below cursor (unix nanos)
	batch  []Event
	recs   []Record
	// pollBatch is the polling mode's batch: a poller's fetch may return
	// more records than batch holds, so it has its own slice, kept at the
	// size it grew to instead of regrowing at every fetch.
	pollBatch []Event
	// viewed: the batch in hand is a view of the handoff buffer's slots
	// (inPlace; not to be cleared: the slots are the ring's, which
	// discards them).
	viewed bool
	// seen is the leader's checkpoint as the gate last loaded it. A
	// leader's position and watermark only grow, so a record that seen
	// already lets through needs no fresh load (the load read
	// a cache line the leader writes at every record, once per record).
	seen release
	// stepHint is where the stage's last lookup of q(t + Lateness) ended
	// in the stream time steps (streamSteps.q): the next one starts there.
	stepHint int
	poller   Poller
	pc       *Context
	// pre: the offsets the stage completed above its restored position in
	// an earlier run (commit.Checkpoint.Above), not read yet. Such a
	// record goes through the gate and is begun and completed without
	// being sequenced or processed: its state effects were persisted with
	// the set (see preDone).
	pre []int64
	// room is the tracker's free slots as of the goroutine's last begin
	// (computed under mu, where the tracker is, but read by this
	// goroutine alone): a lower bound, since only this goroutine takes
	// slots. While it is > 0 a record cannot be refused by a full window,
	// so handle may run it before beginning it in the tracker (see run).
	room int
	// limit is the tracker's BeginLimit as of the same moment (the span
	// of offsets a checkpoint can carry, commit.MaxAboveSpan): a lower
	// bound too, since completions only raise it. With room it says a
	// record at or below it cannot be refused.
	limit int64
}

func newStageRun(p *partitionRun, i int, cp commit.Checkpoint) *stageRun {
	st := p.c.stages[i]
	s := &stageRun{
		p: p, idx: i, name: st.Name, st: st,
		cursor: cp.Next, stream: cp.Watermark,
		batch: make([]Event, 0, min(p.c.cfg.batchSize, firstBatchSlots)),
	}
	s.seq, _ = st.Processor.(Sequencer)
	s.inPlace = i == 0 && len(p.c.stages) == 1
	if i > 0 {
		s.leader = p.stages[i-1]
		if st.Gate == GateKey {
			s.kg = newKeyGate(s, s.leader)
			s.leader.keys = newKeyTable(p.c.cfg.inFlight, s.kg)
		}
	}
	s.rd.store(cp.Next, cp.Watermark)
	s.readPos.Store(cp.Next)
	if p.c.tc != nil {
		s.cut = newTxnCut(s, p.c.tc, cp.Next, cp.Watermark)
	} else {
		s.cut = atLeastOnce{s}
	}
	if p.ps != nil {
		s.state = p.ps.Stage(i)
	}
	s.mu.tracker = commit.NewTracker(cp.Next, p.c.cfg.inFlight)
	s.room = p.c.cfg.inFlight
	s.limit = math.MaxInt64
	s.mu.tracker.SetInitialMeta(cp.Watermark)
	if span := commit.MaxAboveSpan(len(p.c.stages)); p.c.tc == nil && !p.c.cfg.noCarry && span > 0 {
		s.carry = true
		s.mu.tracker.SetSpan(span)
	}
	if len(cp.Above) > 0 {
		s.mu.tracker.SetCompletedAbove(cp.Above)
		s.pre = slices.Clone(cp.Above)
		if p.c.cfg.noCarry {
			s.mu.keep = slices.Clone(cp.Above)
		}
	}
	s.loopDone = make(chan struct{})
	if s.kg != nil && s.carry && !p.c.cfg.admission {
		s.kg.eager = true
	}
	s.cp.store(cp.Next, cp.Watermark)
	s.lastNext.Store(cp.Next)
	s.lastProgress.Store(time.Now().UnixNano())
	s.pc = s.newContext()
	cfg := &p.c.cfg
	s.retry = RetryPolicy{MaxRetries: cfg.maxRetries, Backoff: cfg.retryBackoff, MaxBackoff: cfg.maxRetryBackoff}
	return s
}

func (s *stageRun) newContext() *Context {
	last := s.p.stages[len(s.p.stages)-1]
	return &Context{
		topic: s.p.topic, partition: s.p.partition, stage: s.name,
		evictWM: func() time.Time { return unixTime(lastWM(s.p, last)) },
		st:      boundState{ss: s.state, tc: s.p.c.tc, plain: s.p.c.cfg.noAsOf, foreign: s.p.c.foreign[s.idx]},
	}
}

// lastWM reads the slowest stage's watermark; the last stage's run may not be
// built yet while contexts are created, so it is looked up lazily.
func lastWM(p *partitionRun, last *stageRun) int64 {
	if last == nil {
		last = p.stages[len(p.stages)-1]
	}
	if last == nil {
		return 0
	}
	return last.cp.wm.Load() // alone: it only grows
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// noteProgress records when the position last moved (for stall detection).
func (s *stageRun) noteProgress(next int64) {
	if s.lastNext.Swap(next) != next {
		s.lastProgress.Store(time.Now().UnixNano())
	}
}

func (s *stageRun) startWorkers(workCtx context.Context) {
	s.work = workCtx
	if s.st.KeyConcurrency > 1 {
		s.disp = newDispatcher(s, workCtx)
	}
	_, alo := s.cut.(atLeastOnce)
	s.direct = alo && s.seq == nil && s.disp == nil && s.keys == nil && s.kg == nil
}

func (s *stageRun) stopWorkers() {
	if s.disp != nil {
		s.disp.stop()
	}
}
