package chain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/buffer"
	"github.com/differential-dev/differential/commit"
)

// partitionRun is one PartitionedConsumerChain: the fetcher, the handoff
// buffer, one goroutine per stage (plus workers of key-parallel stages) and
// the commit loop of one assigned partition. Everything it starts has
// returned when run returns — except a processor that ignores its context
// past the shutdown timeout, which is abandoned (see stop).
type partitionRun struct {
	c         *Chain
	topic     string
	partition int32
	src       Source
	committer Committer
	ps        PartitionStore // nil without a store
	log       *slog.Logger

	// With a changelog (WithChangelog): the partition's changelog, the
	// store's changelog side, the changelog offset of the persisted state,
	// the restore's progress and the assignment it restores.
	clp      ChangelogPartition
	cs       ChangelogStore
	clOffset int64
	restored restoreState
	assigned Assignment

	start  int64 // first offset to process; -1 until the first record is seen
	resume []commit.Checkpoint
	// restoredEnd is 1 + the largest offset any stage completed before
	// this run (its resume position, the completed offsets above it): the
	// state a stage reads may hold its leader's writes of records up to
	// there that this run has not fetched yet (see horizonKnown).
	restoredEnd int64
	ring        *buffer.Ring[Event]
	stages      []*stageRun
	mgr         *commit.Manager

	stop context.CancelFunc // stops fetching and dispatching
	// failed is closed at the first fatal error (a key-scoped stage's
	// drain stops waiting for its leader then).
	failed chan struct{}
	// seed hashes record keys for the key-scoped gate (keyHash).
	keySeed maphash.Seed

	mu struct {
		sync.Mutex
		err error // the first fatal error
		// abandoned: the shutdown timeout (or run's return) gave up the
		// records still in flight; their late errors fail nothing.
		abandoned bool
	}

	ckMu      sync.Mutex // serialises checkpoints (commit loop vs final)
	committed atomic.Int64
	commits   atomic.Int64
	commitErr atomic.Int64
	// view is the ring and stages Stats reads (set once they are built,
	// replaced when an exactly-once abort rebuilds them).
	view atomic.Pointer[partView]
	// closers: pollers being closed off their stage goroutines, and the
	// idle release's end checks (idle.go).
	closers sync.WaitGroup
	// pace's state (owned by the first stage's goroutine) and counters.
	// bufCap is the capacity of the partition's buffer: WithBufferSize, or
	// its share of WithBufferBudget (budget.go).
	bufCap               atomic.Int64
	gaveUp               bool
	pauses, pauseGiveUps atomic.Int64
	// fetchedEnd is the offset after the last record the fetcher took from
	// Source.Fetch (owned by the fetcher; read once it returned).
	fetchedEnd int64
	// endCheck: the idle release's confirmation that the log holds
	// nothing the fetcher has not delivered (idle.go).
	endCheck endCheck
	// gaps: where the log shows a stage idle (idle.go).
	gaps *gapLog
	// steps: the log's stream time steps, for the followers' horizons
	// (streamtime.go); nil in a one-stage chain.
	steps *streamSteps
	// kick asks the commit loop to checkpoint now (an at-least-once tail
	// decision waits for a commit that carries it; idle.go).
	kick chan struct{}

	txn txnRun // exactly-once mode (txnpartition.go)
}

// partView is what Stats reads of a running partition.
type partView struct {
	ring   *buffer.Ring[Event]
	stages []*stageRun
}

func newPartitionRun(c *Chain, a Assignment) (*partitionRun, error) {
	if a.Source == nil || a.Committer == nil {
		return nil, errors.New("assignment needs a Source and a Committer")
	}
	p := &partitionRun{
		c: c, topic: a.Topic, partition: a.Partition,
		src: a.Source, committer: a.Committer,
		log:   c.cfg.logger.With("topic", a.Topic, "partition", a.Partition),
		start: -1, failed: make(chan struct{}), keySeed: maphash.MakeSeed(),
	}
	p.committed.Store(a.Committed)
	p.kick = make(chan struct{}, 1)
	p.bufCap.Store(int64(c.cfg.bufferSize))
	record := !c.cfg.noIdleRecord
	p.gaps = newGapLog(c.cfg.idleTimeout, len(c.names), record, p.committed.Load, func(off int64, gap time.Duration) {
		if !record || commit.IdleReleaseCap(len(c.names)) == 0 {
			p.log.Warn("a follower was released at the live tail after a record the log does not show idle: the next record's timestamp is within the idle timeout of it (CreateTime behind this engine's clock?); the decision is not recorded (WithoutRecordedIdleReleases, or too many stages for the commit metadata), so a replay of the partition may decide differently",
				"offset", off, "gap", gap, "idle_timeout", c.cfg.idleTimeout)
			return
		}
		p.log.Info("a follower was released at the live tail after a record the log does not show idle (the next record's timestamp is within the idle timeout of it: CreateTime behind this engine's clock?); the decision is in the commit metadata, and a restart or rewind of this group applies it",
			"offset", off, "gap", gap, "idle_timeout", c.cfg.idleTimeout)
	})
	if len(c.names) > 1 {
		p.steps = newStreamSteps(p.stepFloor)
	}
	if c.cfg.store != nil {
		ps, err := c.openState(a.Topic, a.Partition)
		if err != nil {
			return nil, fmt.Errorf("open state: %w", err)
		}
		p.ps = ps
	}
	if c.cfg.changelog != nil {
		// The state is restored in run, where a revoke can interrupt it.
		if err := p.openChangelog(a); err != nil {
			p.close()
			return nil, err
		}
	} else if err := p.restore(a); err != nil {
		p.close()
		return nil, err
	}
	p.mgr = commit.NewManager(c.names, a.Committed)
	if a.Committed >= 0 {
		p.mgr.Committed(a.Committed, a.Metadata)
	}
	return p, nil
}

// restore decides where every stage resumes, for a chain without a
// changelog (with one: restoreFromChangelog), from the locally persisted
// checkpoints and the group's commit:
//
//   - our metadata: each stage's later position. Local positions ahead are
//     a crash between the store and the commit (the store is written
//     first); local positions behind mean another instance processed the
//     partition since, so the local state is stale and dropped.
//   - metadata that is not ours (another program, a stage list that
//     changed, a tool's offset reset — kafka-consumer-groups writes empty
//     metadata): every stage resumes at the committed offset, and local
//     state whose positions differ from it is dropped. A committed offset
//     below the local positions is an external reset: the operator asked
//     for those records again, so they must meet the state they met the
//     first time, not the state they left behind.
//   - no commit: the local positions, or the claim's first record.
func (p *partitionRun) restore(a Assignment) error {
	names := p.c.names
	var persisted []commit.Checkpoint
	var pok bool
	if p.ps != nil {
		var err error
		if persisted, pok, err = p.ps.Checkpoints(); err != nil {
			return fmt.Errorf("read persisted checkpoints: %w", err)
		}
		if !pok {
			// No complete set of checkpoints (new partition, or a stage
			// added or renamed): entries a different chain left behind
			// cannot be matched to positions, so start clean.
			if err := p.ps.Reset(); err != nil {
				return fmt.Errorf("reset state without checkpoints: %w", err)
			}
		}
	}
	if a.Committed < 0 {
		if pok {
			p.resumeAt(persisted)
		}
		return nil
	}
	st, mok := commit.DecodeState(a.Metadata, a.Committed, names)
	meta := st.Stages
	if mok {
		p.gaps.seed(st.Idle)
	}
	if !mok {
		if a.Metadata != "" {
			p.log.Warn("commit metadata is not ours (written by another program or version); every stage resumes at the committed offset",
				"committed", a.Committed, "metadata_len", len(a.Metadata))
		}
		meta = make([]commit.Checkpoint, len(names))
		for i, n := range names {
			meta[i] = commit.Checkpoint{Stage: n, Next: a.Committed}
		}
	}
	switch {
	case !pok:
		if p.ps != nil && mok {
			p.log.Warn("partition arrives without local window state (at-least-once mode keeps state per instance); stages resume at their committed positions with empty windows")
		}
		p.resumeAt(meta)
	case !mok && slices.ContainsFunc(persisted, func(cp commit.Checkpoint) bool { return cp.Next > a.Committed }):
		if err := p.dropLocalState("the group's committed offset is below the local positions and its metadata is not ours: the offset was reset (e.g. kafka-consumer-groups --reset-offsets); every stage resumes at the committed offset",
			"committed", a.Committed, "persisted", commit.Checkpoints(persisted)); err != nil {
			return err
		}
		p.resumeAt(meta)
	case slices.ContainsFunc(persisted, func(cp commit.Checkpoint) bool { return cp.Next < a.Committed }) ||
		mok && !atOrAfter(persisted, meta):
		if err := p.dropLocalState("local window state is older than the group's commit (the partition was processed elsewhere); resuming without it",
			"persisted", commit.Checkpoints(persisted), "committed", commit.Checkpoints(meta)); err != nil {
			return err
		}
		p.resumeAt(meta)
	default:
		p.resumeAt(persisted)
	}
	return nil
}

// dropLocalState deletes the partition's local state because it does not
// belong to the positions the partition resumes at, and logs why. (With a
// changelog, restoreFromChangelog rebuilds the state up to the committed
// positions instead.)
func (p *partitionRun) dropLocalState(why string, args ...any) error {
	p.log.Warn("dropping the partition's local state: "+why, args...)
	if err := p.ps.Reset(); err != nil {
		return fmt.Errorf("reset local state: %w", err)
	}
	return nil
}

// resumeAt sets where every stage resumes; the partition's first offset is
// the smallest of them.
func (p *partitionRun) resumeAt(cps []commit.Checkpoint) {
	p.resume = cps
	p.start = slices.MinFunc(cps, func(a, b commit.Checkpoint) int { return cmp.Compare(a.Next, b.Next) }).Next
	p.restoredEnd = 0
	for _, cp := range cps {
		p.restoredEnd = max(p.restoredEnd, cp.Next)
		if n := len(cp.Above); n > 0 {
			p.restoredEnd = max(p.restoredEnd, cp.Above[n-1]+1)
		}
	}
}

// fail records the first fatal error and stops the partition. Errors that
// arrive after the shutdown timeout abandoned the records in flight (a late
// acknowledgement, a processor that returned at last) belong to those
// records, which are not committed anyway: they are logged, not
// recorded.
func (p *partitionRun) fail(err error) {
	p.mu.Lock()
	if p.mu.abandoned {
		p.mu.Unlock()
		p.log.Warn("error of an abandoned record ignored", "err", err)
		return
	}
	p.failLocked(err)
}

// failLocked is fail's second half, also failRewind's: called with p.mu
// held, which it releases.
func (p *partitionRun) failLocked(err error) {
	first := p.mu.err == nil
	if first {
		p.mu.err = err
		close(p.failed)
	}
	p.mu.Unlock()
	if first {
		p.log.Error("partition stopping on a fatal error", "err", err)
	}
	if p.stop != nil {
		p.stop()
	}
}

// abandon gives up the records still in flight: from now on their errors
// fail nothing, and their processors' and acknowledgements' context ends.
func (p *partitionRun) abandon(cancelWork context.CancelFunc) {
	p.mu.Lock()
	p.mu.abandoned = true
	p.mu.Unlock()
	cancelWork()
}

func (p *partitionRun) fatal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.err
}

func (p *partitionRun) close() {
	if p.clp != nil {
		if err := p.clp.Close(); err != nil {
			p.log.Warn("closing the partition's changelog", "err", err)
		}
	}
	if p.ps != nil {
		if err := p.ps.Close(); err != nil {
			p.log.Warn("closing partition state", "err", err)
		}
	}
}

func offsetOf(e *Event) int64 { return e.Offset }

// run is the partition's life: find the start, build the stages, run until
// ctx ends (revoke, shutdown), the claim ends or a fatal error, then stop
// (drain within the shutdown timeout) and make the final commit.
func (p *partitionRun) run(ctx context.Context) error {
	defer p.close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	p.stop = stop
	// Processors and acknowledgements keep workCtx while the partition
	// drains; it ends only when the shutdown timeout abandons them.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer p.abandon(cancelWork)

	if p.clp != nil {
		if ro, ok := p.c.cfg.observer.(RestoreObserver); ok {
			ro.RestoreStarted(p.topic, p.partition, p.stats)
			defer ro.RestoreStopped(p.topic, p.partition)
		}
		if err := p.restoreFromChangelog(runCtx, p.assigned); err != nil {
			if runCtx.Err() != nil {
				p.log.Info("partition revoked while restoring its state; what was applied is kept")
				return nil
			}
			return err
		}
	}
	first, err := p.locateStart(runCtx)
	if err != nil || p.start < 0 {
		return err
	}
	p.build()
	if po, ok := p.c.cfg.observer.(PartitionObserver); ok {
		po.PartitionStarted(p.topic, p.partition, p.stats)
		defer po.PartitionStopped(p.topic, p.partition)
	}
	if p.c.tc != nil {
		return p.runTxn(runCtx, workCtx, cancelWork, first)
	}
	g := p.launch(runCtx, workCtx, first)
	<-runCtx.Done()
	timedOut := p.shutdown(g, cancelWork)
	return p.finish(ctx, timedOut)
}

// locateStart fetches the claim's first record when neither a commit nor
// local state says where the partition starts (p.start stays -1 when the
// partition stopped first).
func (p *partitionRun) locateStart(ctx context.Context) ([]Record, error) {
	if p.start >= 0 {
		return nil, nil
	}
	recs, err := p.src.Fetch(ctx, nil)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("fetch: %w", err)
	}
	start := recs[0].Offset
	cps := make([]commit.Checkpoint, len(p.c.names))
	for i, n := range p.c.names {
		cps[i] = commit.Checkpoint{Stage: n, Next: start}
	}
	p.resumeAt(cps)
	return recs, nil
}

// build creates the handoff buffer and the stages at their resume positions.
func (p *partitionRun) build() {
	cfg := &p.c.cfg
	p.ring = buffer.New[Event](int(p.bufCap.Load()), p.start, offsetOf)
	p.ring.LimitReadAhead(readAhead(cfg))
	p.stages = make([]*stageRun, len(p.c.stages))
	for i := range p.c.stages {
		p.stages[i] = newStageRun(p, i, p.resume[i])
	}
	p.view.Store(&partView{ring: p.ring, stages: p.stages})
	// A share set between New and the Store above reached no ring.
	p.ring.SetCapacity(int(p.bufCap.Load()))
	p.log.Info("partition started", "resume", commit.Checkpoints(p.resume))
}

// discardRead drops from the buffer the records every stage has read
// (below the slowest stage's read position), so the buffer holds no
// pointers to records nobody will read: with one stage, or followers
// right behind the first, it holds little more than what is fetched ahead
// (README "Why the misses": every GC cycle traced the whole buffer and the
// fetch responses its records kept alive). Called by the first stage
// before each read (pace); the others' positions are read atomically (a
// stage's is at most a batch behind its cursor, so the bound is safe).
func (p *partitionRun) discardRead() {
	slowest := int64(math.MaxInt64)
	for _, s := range p.stages {
		slowest = min(slowest, s.readPos.Load())
	}
	p.ring.Discard(slowest)
}

// slowestBuffered is the follower reading the buffer with the smallest read
// position, or nil when no follower reads it.
func (p *partitionRun) slowestBuffered() *stageRun {
	var slow *stageRun
	for _, s := range p.stages[1:] {
		if s.mode.Load() == modeBuffered && (slow == nil || s.readPos.Load() < slow.readPos.Load()) {
			slow = s
		}
	}
	return slow
}

// pauseLag is how far the first stage may read ahead of the slowest
// buffered follower before it pauses (pace): beyond it the fetcher, a
// read-ahead past the first stage, is within a quarter of the buffer of
// evicting that follower's cursor. 0 (never pause) when the buffer is too
// small to keep followers in it at all: polling is what it asked for.
func pauseLag(cfg *config, capacity int) int64 {
	return max(0, int64(capacity-readAhead(cfg)-capacity/4))
}

// maxPause bounds one pause of the first stage for a follower (pace).
const maxPause = 20 * time.Millisecond

// pace is the first stage's step before each buffered read: it discards
// what every stage has read and, when the slowest buffered follower is
// pauseLag or more behind cursor, waits until that follower has read up to
// half of pauseLag behind — at most maxPause, then it gives up until the
// followers are back within half of pauseLag (so a follower truly slower
// than the first stage costs it one bounded pause per time it falls out of
// the buffer, and then polls Kafka itself, as DESIGN.md "Buffered hand-off with a polling fallback" has it).
//
// Why: on two cores the first stage and the fetcher can hold both while a
// woken follower waits in a run queue until the scheduler preempts them
// (10 ms: tens of thousands of no-op records), by which time the buffer
// has evicted the follower and it polls at a higher cost per record
// (measured: 2–26 fall-outs per 300,000 records in a 4-stage no-op chain,
// BenchmarkChainExtraStage). A yield is not enough: the other core picks
// the first stage up again at once. Blocking for a moment hands the core
// to the follower. The pause waits on the follower's read signal
// (notified once per batch it reads), never in a loop.
func (p *partitionRun) pace(ctx context.Context, cursor int64) {
	p.discardRead()
	lag := pauseLag(&p.c.cfg, p.ring.Cap())
	if lag <= 0 {
		return
	}
	slow := p.slowestBuffered()
	if slow == nil || cursor-slow.readPos.Load() < lag {
		if slow == nil || cursor-slow.readPos.Load() < lag/2 {
			p.gaveUp = false
		}
		return
	}
	if p.gaveUp {
		return
	}
	p.pauses.Add(1)
	timer := time.NewTimer(maxPause)
	defer timer.Stop()
	for {
		ch := slow.readMoved.wait()
		if slow.mode.Load() != modeBuffered || cursor-slow.readPos.Load() <= lag/2 {
			// Another follower may be the slowest now.
			if slow = p.slowestBuffered(); slow == nil || cursor-slow.readPos.Load() <= lag/2 {
				return
			}
			continue
		}
		select {
		case <-ch:
		case <-timer.C:
			p.gaveUp = true
			p.pauseGiveUps.Add(1)
			return
		case <-ctx.Done():
			return
		}
	}
}

// readAhead is how far the fetcher may run ahead of the first stage: a few
// batches. The rest of the buffer holds what the first stage has read for
// its followers. Without the limit the fetcher filled the whole buffer
// ahead of a first stage that was slower than it (the no-op chain's, for
// one), so every record was read long after it was written, out of the
// cache (README, "No-op chain vs raw consumer").
func readAhead(cfg *config) int {
	return min(cfg.bufferSize, readAheadBatches*cfg.batchSize)
}

const readAheadBatches = 4

// goroutines are a running partition's: the fetcher and the commit loop
// (fetchAndCommit), and the stages with their workers (loopsDone is closed
// once every stage loop returned, workersDone once every key-parallel
// worker did too).
type goroutines struct {
	fetchAndCommit sync.WaitGroup
	loopsDone      chan struct{}
	workersDone    chan struct{}
}

func (p *partitionRun) launch(runCtx, workCtx context.Context, first []Record) *goroutines {
	g := &goroutines{loopsDone: make(chan struct{}), workersDone: make(chan struct{})}
	g.fetchAndCommit.Go(func() { p.fetch(runCtx, first) })
	if p.c.tc == nil {
		// Exactly-once mode commits in the chain's cycles instead.
		g.fetchAndCommit.Go(func() { p.commitLoop(runCtx) })
	}
	var loops sync.WaitGroup
	for _, s := range p.stages {
		s.startWorkers(workCtx)
		loops.Go(func() {
			defer close(s.loopDone)
			if err := s.loop(runCtx); err != nil {
				p.fail(err)
			}
		})
	}
	go func() {
		loops.Wait()
		close(g.loopsDone)
		for _, s := range p.stages {
			s.stopWorkers()
		}
		close(g.workersDone)
	}()
	return g
}

// shutdown stops the partition once runCtx ended: the stage loops stop
// beginning records and finish the one in hand, and every begun record —
// queued behind a busy key, waiting to retry or for its acknowledgement —
// completes within the shutdown timeout, so the completed set is contiguous
// and the final commit covers every record processed (I6). If the timeout
// fires first, the records still in flight are abandoned (reported true):
// not committed, so processed again later (at-least-once). A processor that
// ignores even the abandonment is given abandonGrace, then left behind with
// its goroutine (logged): it must not hold a revoke for ever.
func (p *partitionRun) shutdown(g *goroutines, cancelWork context.CancelFunc) (timedOut bool) {
	cfg := &p.c.cfg
	deadline := time.NewTimer(cfg.shutdownTimeout)
	defer deadline.Stop()
	select {
	case <-g.loopsDone:
		timedOut = p.drain(deadline.C)
	case <-deadline.C:
		timedOut = true
	}
	if timedOut {
		p.abandon(cancelWork)
		p.log.Warn("shutdown timeout: abandoning in-flight records; they are not committed and will be processed again",
			"timeout", cfg.shutdownTimeout, "positions", p.positions())
		grace := time.NewTimer(abandonGrace(cfg.shutdownTimeout))
		defer grace.Stop()
		select {
		case <-g.workersDone:
		case <-grace.C:
			p.log.Error("a processor ignored its context after the shutdown timeout; its goroutine is abandoned and its record (at or after the stage's position) is processed again by the next owner",
				"positions", p.positions())
			p.fetchAndCommitDone(g)
			return true
		}
	}
	<-g.workersDone
	p.fetchAndCommitDone(g)
	return timedOut
}

func (p *partitionRun) fetchAndCommitDone(g *goroutines) {
	g.fetchAndCommit.Wait()
	p.closers.Wait()
}

// abandonGrace is how long a stopping partition waits, after the shutdown
// timeout cancelled its processors' context, for them to return before it
// leaves them behind: a tenth of the timeout, at most a second (processors
// that honour their context return at once).
func abandonGrace(shutdownTimeout time.Duration) time.Duration {
	return min(shutdownTimeout/10, time.Second)
}

// positions is every stage's position, for logs.
func (p *partitionRun) positions() map[string]int64 {
	out := make(map[string]int64, len(p.stages))
	for _, s := range p.stages {
		out[s.name] = s.cp.next.Load()
	}
	return out
}

// finish makes the final checkpoint and commit and returns the partition's
// result: its first fatal error, else a failed final checkpoint, else
// ErrShutdownTimeout and/or ErrFinalCommit (a failed commit, changelog
// append or store write: finalCheckpointErr), else nil.
func (p *partitionRun) finish(ctx context.Context, timedOut bool) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.c.cfg.shutdownTimeout)
	defer cancel()
	var finalErr error
	if err := p.checkpoint(fctx, true); err != nil {
		if !errors.Is(err, ErrFinalCommit) {
			p.log.Error("final checkpoint failed", "err", err)
		}
		finalErr = err
	}
	p.log.Info("partition stopped", "committed", p.committed.Load())
	if err := p.fatal(); err != nil {
		return err
	}
	if finalErr != nil && !errors.Is(finalErr, ErrFinalCommit) {
		return finalErr
	}
	if timedOut {
		return errors.Join(ErrShutdownTimeout, finalErr)
	}
	return finalErr
}

// fetch is the partition's only reader of the main stream: it decodes every
// record once and appends batches to the handoff buffer.
func (p *partitionRun) fetch(ctx context.Context, first []Record) {
	defer p.ring.Close(io.EOF)
	recs := first
	p.noteFetched(recs)
	if p.txn.refetch > p.start && !p.refill(ctx) {
		return
	}
	for {
		if len(recs) == 0 {
			var err error
			if recs, err = p.src.Fetch(ctx, recs[:0]); err != nil {
				if ctx.Err() != nil {
					return // the partition is stopping (or, exactly-once, its epoch ended)
				}
				if !errors.Is(err, io.EOF) {
					p.fail(fmt.Errorf("fetch: %w", err))
				}
				// The claim ended (revoke).
				p.stop()
				return
			}
			p.noteFetched(recs)
		}
		// Records below every stage's resume position, or re-delivered,
		// are dropped.
		high := p.ring.High()
		n := 0
		for i := range recs {
			if recs[i].Offset >= high {
				if n != i {
					recs[n] = recs[i]
				}
				n++
			}
		}
		p.gaps.note(recs[:n]) // before the ring: a gap is known once its second record can be read
		err := p.appendRing(ctx, recs[:n])
		clear(recs)
		recs = recs[:0]
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, buffer.ErrClosed) {
				// Offsets out of order from the source: stopping the
				// fetcher quietly would stall the partition for ever.
				p.fail(fmt.Errorf("fetch: %w", err))
			}
			return
		}
	}
}

// appendRing decodes recs straight into the handoff buffer's slots
// (Ring.Reserve): each event is written once, where the stages read it,
// instead of into a batch that Append then copies (the fetcher
// copied every 216-byte event twice, and with the garbage collector
// running every copy of its pointers runs write barriers). Decoding runs
// outside the ring's lock.
func (p *partitionRun) appendRing(ctx context.Context, recs []Record) error {
	for len(recs) > 0 {
		a, b, err := p.ring.Reserve(ctx, len(recs))
		if err != nil {
			return err
		}
		k := p.decodeInto(a, recs)
		kb := p.decodeInto(b, recs[k:])
		// Before Commit: a leader can read a record only once its stream
		// time step is known.
		p.steps.note(a[:k])
		p.steps.note(b[:kb])
		k += kb
		recs = recs[k:]
		if err := p.ring.Commit(k); err != nil {
			return err
		}
	}
	return nil
}

// decodeInto decodes the first min(len(dst), len(recs)) records into dst
// and returns how many. Every field of each event is written (a slot may
// hold an evicted event).
func (p *partitionRun) decodeInto(dst []Event, recs []Record) int {
	n := min(len(dst), len(recs))
	for i := range n {
		ev := &dst[i]
		ev.Record = recs[i]
		ev.Decoded, ev.Err = p.c.dec.Decode(&ev.Record)
		ev.span, ev.asOf = nil, 0
	}
	return n
}

// noteFetched records how far the main stream has been read.
func (p *partitionRun) noteFetched(recs []Record) {
	if n := len(recs); n > 0 {
		p.fetchedEnd = max(p.fetchedEnd, recs[n-1].Offset+1)
	}
}

func (p *partitionRun) decode(r *Record) Event {
	ev := Event{Record: *r}
	ev.Decoded, ev.Err = p.c.dec.Decode(r)
	return ev
}

// appendDecoded appends r's event to evs, decoded in its slot: the event
// (216 bytes) is written once, not built and then copied. A
// slot within evs's capacity is reused without zeroing it first: every
// field is written.
func (p *partitionRun) appendDecoded(evs []Event, r *Record) []Event {
	if n := len(evs); n < cap(evs) {
		evs = evs[:n+1]
	} else {
		evs = append(evs, Event{})
	}
	ev := &evs[len(evs)-1]
	ev.Record = *r
	ev.Decoded, ev.Err = p.c.dec.Decode(&ev.Record)
	ev.span, ev.asOf = nil, 0
	return evs
}

func (p *partitionRun) commitLoop(ctx context.Context) {
	// Spread the partitions' checkpoints over the interval (a fixed phase per
	// partition) instead of syncing every partition's batch at one instant.
	phase := time.Duration(float64(p.c.cfg.commitInterval) * math.Mod(float64(p.partition)*0.6180339887, 1))
	first := true
	for {
		d := p.c.cfg.commitInterval
		if first {
			d, first = d+phase, false
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-p.kick:
			t.Stop()
		}
		if err := p.checkpoint(ctx, false); err != nil {
			p.fail(err)
			return
		}
		p.checkQuietTail(ctx) // Stats' lag at a transactional tail (idle.go)
		p.gaps.trim(p.committed.Load())
	}
}

// snapshot returns every stage's published checkpoint, each a pair that
// existed (published), read from the last stage to the first: positions
// only grow and a follower never passes its leader (I1), so a leader read
// after its follower is at least where the follower is — the snapshot never
// stores a follower beyond its leader, which a leader-first read could.
func (p *partitionRun) snapshot() []commit.Checkpoint {
	cps := make([]commit.Checkpoint, len(p.stages))
	for i := len(p.stages) - 1; i >= 0; i-- {
		cps[i] = p.stages[i].checkpoint()
	}
	return cps
}

// checkpoint persists every stage's checkpoint with its state (DESIGN I4),
// then commits min(next) with all checkpoints as metadata (I3). The store is
// written first: a crash between the two leaves local positions ahead of the
// group's, which restore handles. With a changelog the order is DESIGN.md "State that follows its partition":
// the positions cover only records whose outputs and dead letters are
// acknowledged (I5); the state changes go to the changelog and are
// acknowledged; one batch persists state, positions and changelog offset;
// the commit's metadata carries positions and changelog offset.
func (p *partitionRun) checkpoint(ctx context.Context, final bool) error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	cps := p.snapshot()
	for i, s := range p.stages {
		s.noteProgress(cps[i].Next)
	}
	state := commit.State{Stages: cps, Changelog: commit.NoChangelog}
	var pending *commit.IdleRelease
	state.Idle, pending = p.gaps.forCommit(minNext(cps))
	if p.ps != nil {
		// The last stage is the slowest: its watermark bounds eviction.
		evict := EvictBefore(unixTime(cps[len(cps)-1].Watermark))
		if p.clp != nil {
			off, err := p.persistWithChangelog(ctx, cps, evict)
			if err != nil {
				return p.finalCheckpointErr(final, err)
			}
			state.Changelog = off
		} else if err := p.ps.Checkpoint(cps, evict); err != nil {
			return p.finalCheckpointErr(final, fmt.Errorf("persist checkpoint: %w", err))
		}
	}
	off, md, changed, err := p.mgr.NextState(state)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if !changed {
		return nil
	}
	if err := p.committer.Commit(ctx, off, md); err != nil {
		p.commitErr.Add(1)
		if final {
			p.log.Error("final commit failed; the next owner resumes from the previous commit", "offset", off, "err", err)
			return fmt.Errorf("%w: offset %d: %w", ErrFinalCommit, off, err)
		}
		p.log.Warn("commit failed; retrying at the next interval", "offset", off, "err", err)
		return nil
	}
	p.mgr.Committed(off, md)
	p.committed.Store(off)
	p.commits.Add(1)
	if pending != nil {
		p.gaps.durable(pending)
	}
	if o := p.c.cfg.observer; o != nil {
		o.Committed(p.topic, p.partition, off, md)
	}
	return nil
}

// minNext is the offset a commit of cps is at: their smallest position.
func minNext(cps []commit.Checkpoint) int64 {
	return slices.MinFunc(cps, func(a, b commit.Checkpoint) int { return cmp.Compare(a.Next, b.Next) }).Next
}

// finalCheckpointErr is a checkpoint's failed store half (changelog append,
// store write): at the final checkpoint it is a failed final commit
// (ErrFinalCommit, the cause joined), as exactly-once reports a final cycle
// that could not append or persist — nothing was committed, so the next
// owner resumes from the previous commit and repeats what completed since.
// A broker outage at a SIGTERM is thus a clean stop in both modes.
func (p *partitionRun) finalCheckpointErr(final bool, err error) error {
	if !final {
		return err
	}
	p.log.Error("final checkpoint failed; the next owner resumes from the previous commit", "committed", p.committed.Load(), "err", err)
	return fmt.Errorf("%w: %w", ErrFinalCommit, err)
}

// drain waits until no stage has a begun record outstanding (true if the
// deadline fires first).
func (p *partitionRun) drain(deadline <-chan time.Time) (timedOut bool) {
	for _, s := range p.stages {
		for {
			ch := s.drained.wait()
			if s.outstanding.Load() == 0 {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				return true
			}
		}
	}
	return false
}

// openState opens a partition's state for the chain's stages; with
// WithAsOfReads(false) the store is told to keep no versions, and with
// Private prefixes it is told each stage's.
func (c *Chain) openState(topic string, partition int32) (PartitionStore, error) {
	ps, err := c.cfg.store.OpenPartition(topic, partition, c.names)
	if err != nil {
		return nil, err
	}
	if c.private != nil {
		if pe, ok := ps.(PrivateEvicter); ok {
			pe.EvictPrivate(c.private)
		}
	}
	if c.cfg.noAsOf {
		if hk, ok := ps.(HistoryKeeper); ok {
			hk.KeepHistory(false)
		}
	}
	return ps, nil
}
