package chain

import (
	"context"
	"errors"
	"fmt"
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
// returned when run returns.
type partitionRun struct {
	c         *Chain
	topic     string
	partition int32
	src       Source
	committer Committer
	ps        PartitionStore // nil without a store
	log       *slog.Logger

	start  int64 // first offset to process; -1 until the first record is seen
	resume []commit.Checkpoint
	ring   *buffer.Ring[Event]
	stages []*stageRun
	mgr    *commit.Manager

	stop    context.CancelFunc // stops fetching and dispatching
	errOnce sync.Once
	err     error

	ckMu      sync.Mutex // serialises checkpoints (commit loop vs final)
	committed atomic.Int64
	commits   atomic.Int64
	commitErr atomic.Int64
	// ready is set once ring and stages are built; Stats reads them only then.
	ready atomic.Bool
	// closers: pollers being closed off their stage goroutines.
	closers sync.WaitGroup
}

func newPartitionRun(c *Chain, a Assignment) (*partitionRun, error) {
	if a.Source == nil || a.Committer == nil {
		return nil, errors.New("assignment needs a Source and a Committer")
	}
	p := &partitionRun{
		c: c, topic: a.Topic, partition: a.Partition,
		src: a.Source, committer: a.Committer,
		log:   c.cfg.logger.With("topic", a.Topic, "partition", a.Partition),
		start: -1,
	}
	p.committed.Store(a.Committed)
	if c.cfg.store != nil {
		ps, err := c.cfg.store.OpenPartition(a.Topic, a.Partition, c.names)
		if err != nil {
			return nil, fmt.Errorf("open state: %w", err)
		}
		p.ps = ps
	}
	if err := p.restore(a); err != nil {
		p.close()
		return nil, err
	}
	p.mgr = commit.NewManager(c.names, a.Committed)
	if a.Committed >= 0 {
		p.mgr.Committed(a.Committed, a.Metadata)
	}
	return p, nil
}

// restore decides where every stage resumes: the later of its locally
// persisted checkpoint and the one in the group's commit metadata. Local
// state older than the group's commit belongs to an earlier ownership of the
// partition (another instance has processed since), so it is dropped.
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
	var meta []commit.Checkpoint
	var mok bool
	if a.Committed >= 0 {
		meta, mok = commit.DecodeMetadata(a.Metadata, a.Committed, names)
		if !mok && a.Metadata != "" {
			p.log.Warn("commit metadata is not ours (written by another program or version); every stage resumes at the committed offset",
				"committed", a.Committed, "metadata_len", len(a.Metadata))
		}
		if !mok {
			meta = make([]commit.Checkpoint, len(names))
			for i, n := range names {
				meta[i] = commit.Checkpoint{Stage: n, Next: a.Committed}
			}
		}
	}
	switch {
	case pok && meta != nil:
		stale := false
		for i := range persisted {
			if persisted[i].Next < meta[i].Next {
				stale = true
			}
		}
		if stale {
			p.log.Warn("local window state is older than the group's commit (the partition was processed elsewhere); dropping it and resuming without it",
				"persisted", commit.Checkpoints(persisted), "committed", commit.Checkpoints(meta))
			if err := p.ps.Reset(); err != nil {
				return fmt.Errorf("reset stale state: %w", err)
			}
			p.resume = meta
		} else {
			p.resume = persisted
		}
	case pok:
		p.resume = persisted
	case meta != nil:
		if p.ps != nil && mok {
			p.log.Warn("partition arrives without local window state (at-least-once mode keeps state per instance); stages resume at their committed positions with empty windows")
		}
		p.resume = meta
	}
	if p.resume != nil {
		p.start = slices.MinFunc(p.resume, func(a, b commit.Checkpoint) int {
			return int(min(max(a.Next-b.Next, -1), 1))
		}).Next
	}
	return nil
}

func (p *partitionRun) fail(err error) {
	p.errOnce.Do(func() {
		p.err = err
		p.log.Error("partition stopping on a fatal error", "err", err)
	})
	if p.stop != nil {
		p.stop()
	}
}

func (p *partitionRun) close() {
	if p.ps != nil {
		if err := p.ps.Close(); err != nil {
			p.log.Warn("closing partition state", "err", err)
		}
	}
}

func offsetOf(e *Event) int64 { return e.Offset }

func (p *partitionRun) run(ctx context.Context) error {
	defer p.close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	p.stop = stop
	// Processors and acknowledgements keep workCtx while the partition
	// drains; it ends only when the shutdown timeout abandons them.
	workCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()

	var first []Record
	if p.start < 0 {
		// No commit and no local state: the claim's first record tells
		// where the partition starts.
		recs, err := p.src.Fetch(runCtx, nil)
		if err != nil {
			if runCtx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("fetch: %w", err)
		}
		first = recs
		p.start = recs[0].Offset
		p.resume = make([]commit.Checkpoint, len(p.c.names))
		for i, n := range p.c.names {
			p.resume[i] = commit.Checkpoint{Stage: n, Next: p.start}
		}
	}
	cfg := &p.c.cfg
	p.ring = buffer.NewWithClock[Event](cfg.bufferSize, p.start, offsetOf, cfg.clock.Now)
	p.stages = make([]*stageRun, len(p.c.stages))
	for i := range p.c.stages {
		p.stages[i] = newStageRun(p, i, p.resume[i])
	}
	p.ready.Store(true)
	p.log.Info("partition started", "resume", commit.Checkpoints(p.resume))
	unregister := p.registerMetrics()
	defer unregister()

	var wg sync.WaitGroup
	wg.Go(func() { p.fetch(runCtx, first) })
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		p.commitLoop(runCtx)
	}()
	var stagesWG sync.WaitGroup
	for _, s := range p.stages {
		s.startWorkers(runCtx, workCtx)
		stagesWG.Go(func() {
			if err := s.loop(runCtx); err != nil {
				p.fail(err)
			}
		})
	}
	loopsDone := make(chan struct{})
	go func() {
		stagesWG.Wait()
		close(loopsDone)
	}()

	// Stop: ctx ended (revoke, shutdown), the claim ended, or a fatal error.
	// Stage loops stop beginning records but finish the one in hand; then
	// the records begun must complete (processing and acknowledgement)
	// within the shutdown timeout before the final commit.
	<-runCtx.Done()
	deadline := cfg.clock.NewTimer(cfg.shutdownTimeout)
	defer deadline.Stop()
	timedOut := false
	select {
	case <-loopsDone:
		timedOut = p.drain(deadline.C())
	case <-deadline.C():
		timedOut = true
	}
	if timedOut {
		abandon()
		p.log.Warn("shutdown timeout: abandoning in-flight records; they are not committed and will be processed again", "timeout", cfg.shutdownTimeout)
		<-loopsDone
	}
	wg.Wait()
	<-commitDone
	for _, s := range p.stages {
		s.stopWorkers()
	}
	p.closers.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	var finalErr error
	if err := p.checkpoint(fctx, true); err != nil {
		if errors.Is(err, ErrFinalCommit) {
			finalErr = err
		} else {
			p.fail(err)
		}
	}
	p.log.Info("partition stopped", "committed", p.committed.Load())
	if p.err != nil {
		return p.err
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
	evs := make([]Event, 0, p.c.cfg.batchSize)
	for {
		if len(recs) == 0 {
			var err error
			if recs, err = p.src.Fetch(ctx, recs[:0]); err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					p.fail(fmt.Errorf("fetch: %w", err))
				}
				// The claim ended (revoke) or the partition is stopping.
				p.stop()
				return
			}
		}
		evs = evs[:0]
		high := p.ring.High()
		for i := range recs {
			if recs[i].Offset < high {
				continue // below every stage's resume position, or re-delivered
			}
			evs = append(evs, p.decode(&recs[i]))
		}
		clear(recs)
		recs = recs[:0]
		if len(evs) > 0 {
			if err := p.ring.Append(ctx, evs); err != nil {
				if ctx.Err() == nil && !errors.Is(err, buffer.ErrClosed) {
					// Offsets out of order from the source: stopping the
					// fetcher quietly would stall the partition for ever.
					p.fail(fmt.Errorf("fetch: %w", err))
				}
				return
			}
			clear(evs)
		}
	}
}

func (p *partitionRun) decode(r *Record) Event {
	ev := Event{Record: *r}
	ev.Decoded, ev.Err = p.c.dec.Decode(r)
	return ev
}

func (p *partitionRun) commitLoop(ctx context.Context) {
	cl := p.c.cfg.clock
	// Spread the partitions' checkpoints over the interval (a fixed phase per
	// partition) instead of syncing every partition's batch at one instant.
	phase := time.Duration(float64(p.c.cfg.commitInterval) * math.Mod(float64(p.partition)*0.6180339887, 1))
	first := true
	for {
		d := p.c.cfg.commitInterval
		if first {
			d, first = d+phase, false
		}
		t := cl.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if err := p.checkpoint(ctx, false); err != nil {
			p.fail(err)
			return
		}
	}
}

// checkpoint persists every stage's checkpoint with its state (DESIGN I4),
// then commits min(next) with all checkpoints as metadata (I3). The store is
// written first: a crash between the two leaves local positions ahead of the
// group's, which restore handles.
func (p *partitionRun) checkpoint(ctx context.Context, final bool) error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	cps := make([]commit.Checkpoint, len(p.stages))
	for i, s := range p.stages {
		cps[i] = commit.Checkpoint{Stage: s.name, Next: s.next.Load(), Watermark: s.wm.Load()}
		s.noteProgress(cps[i].Next)
	}
	if p.ps != nil {
		var evict time.Time
		if wm := cps[len(cps)-1].Watermark; wm != 0 {
			// Entries expiring strictly before the slowest stage's watermark
			// can no longer be used by any rule.
			evict = time.Unix(0, wm-1)
		}
		if err := p.ps.Checkpoint(cps, evict); err != nil {
			return fmt.Errorf("persist checkpoint: %w", err)
		}
	}
	off, md, changed, err := p.mgr.Next(cps)
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
	if o := p.c.cfg.observer; o != nil {
		o.Committed(p.topic, p.partition, off, md)
	}
	return nil
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

// leaderIdle reports whether a leader at position next has completed
// everything the partition has fetched and, if so, when it counts as idle:
// IdleTimeout after the last record arrived. (The high watermark is not
// required: a transactional input keeps it one marker above the last record
// for ever, which would stall the tail. The fetcher reads continuously, so
// "nothing arrived for IdleTimeout" already means the log's end.)
func (p *partitionRun) leaderIdle(next int64) (caughtUp bool, at time.Time) {
	if next < p.ring.High() {
		return false, time.Time{}
	}
	return true, p.ring.LastAppend().Add(p.c.cfg.idleTimeout)
}
