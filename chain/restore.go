package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/commit"
)

// ErrChangelogBehind: the group's commit says the partition's state is a
// changelog prefix longer than the changelog: the changelog topic was
// deleted, recreated or truncated, and the state is gone.
var ErrChangelogBehind = errors.New("chain: the changelog is shorter than the committed state")

// RestoreStats describes how a partition's state was brought to the
// group's committed checkpoint when the partition was assigned (chains with
// a changelog only; zero otherwise).
type RestoreStats struct {
	// Restoring is true until the stages start.
	Restoring bool
	// Phase is what the restore does now or did last: "checking",
	// "reading" (applying changelog records to the local state),
	// "reconciling" (cancelling records appended after the committed
	// offset by an instance that stopped before its commit), "seeding"
	// (writing the local state into a changelog that does not hold it),
	// "done".
	Phase string
	// Reason says why the local state was used as it is, caught up,
	// or rebuilt.
	Reason string
	// From and To bound the changelog offsets being read; Position is the
	// next one.
	From, To, Position int64
	// Records and Bytes count the changelog records (and their key and
	// value bytes) applied to the local state.
	Records, Bytes int64
	// Appended counts the records the restore appended to the changelog
	// (reconciling, seeding).
	Appended int64
	// Started is when the restore began; Duration how long it took (so
	// far, while Restoring).
	Started  time.Time
	Duration time.Duration
}

const (
	phaseNone int32 = iota
	phaseChecking
	phaseReading
	phaseReconciling
	phaseSeeding
	phaseDone
)

var phaseNames = [...]string{"", "checking", "reading", "reconciling", "seeding", "done"}

// restoreState is a partition's restore progress, written by the restore
// and read by Stats and metrics from any goroutine.
type restoreState struct {
	phase                    atomic.Int32
	from, to, pos            atomic.Int64
	records, bytes, appended atomic.Int64
	started, finished        atomic.Int64 // unix nanos; 0 = not yet
	reason                   atomic.Pointer[string]
}

func (r *restoreState) stats(now time.Time) RestoreStats {
	ph := r.phase.Load()
	if ph == phaseNone {
		return RestoreStats{}
	}
	s := RestoreStats{
		Restoring: ph != phaseDone, Phase: phaseNames[ph],
		From: r.from.Load(), To: r.to.Load(), Position: r.pos.Load(),
		Records: r.records.Load(), Bytes: r.bytes.Load(), Appended: r.appended.Load(),
		Started: unixTime(r.started.Load()),
	}
	if p := r.reason.Load(); p != nil {
		s.Reason = *p
	}
	end := now
	if f := r.finished.Load(); f != 0 {
		end = unixTime(f)
	}
	if !s.Started.IsZero() {
		s.Duration = end.Sub(s.Started)
	}
	return s
}

func (r *restoreState) setReason(s string) { r.reason.Store(&s) }

// restoreFromChangelog brings the partition's local state to the group's
// committed checkpoint before any stage starts (DESIGN.md "State that follows its partition") and sets where
// every stage resumes. The state machine, on (committed metadata, local
// changelog offset L and checkpoints, changelog end E):
//
//   - committed with changelog offset C (the normal case):
//     L == C: the local state is the committed one; use it.
//     L <  C: local is a prefix of the same history; read [L, C) — unless
//     it was written more than half the changelog's tombstone retention
//     ago (compaction may have dropped deletions it missed): rebuild.
//     L >  C, E == L, local positions >= committed: this instance persisted
//     a checkpoint and stopped before its Kafka commit, and nobody wrote
//     since; use it, at its own positions.
//     otherwise (no local offset, or local ahead on another history): wipe,
//     read [0, C).
//   - committed by a chain without a changelog (version 1 metadata): the
//     previous rules on local state (keep it unless older than the commit),
//     then seed the changelog with it.
//   - committed by another program (an offset reset): wipe, and make the
//     changelog say "empty".
//   - nothing committed: keep local state only if it is the changelog's
//     whole content (L == E), else wipe.
//
// Then records after the state's offset (appended by an instance that
// stopped before committing them) are cancelled: for each of their keys the
// restored value, or a tombstone, is appended, so that every later commit's
// changelog prefix again holds exactly the state at its positions. Never is
// a record at or after C applied: those belong to records the stages will
// process again. A cancelled context stops the restore; what was applied
// stays and the next assignment continues from it.
func (p *partitionRun) restoreFromChangelog(ctx context.Context, a Assignment) error {
	rs := &p.restored
	rs.started.Store(time.Now().UnixNano())
	rs.phase.Store(phaseChecking)
	names := p.c.names

	end, err := p.clp.End(ctx)
	if err != nil {
		return fmt.Errorf("changelog end offset: %w", err)
	}
	local, written, lok, err := p.cs.ChangelogOffset()
	if err != nil {
		return fmt.Errorf("local changelog offset: %w", err)
	}
	lcps, pok, err := p.cs.Checkpoints()
	if err != nil {
		return fmt.Errorf("read persisted checkpoints: %w", err)
	}
	var st commit.State
	ours := false
	if a.Committed >= 0 {
		st, ours = commit.DecodeState(a.Metadata, a.Committed, names)
	}
	if ours {
		// The idle releases decided live at or above the committed offset
		// apply whichever positions the stages resume at (the local ones
		// are at or after the commit's).
		p.gaps.seed(st.Idle)
	}
	log := p.log.With("changelog_end", end)
	if lok {
		log = log.With("local_changelog_offset", local)
	}

	var resume []commit.Checkpoint // nil: start at the claim's first record
	base := int64(0)               // the state's changelog offset once restored
	seed := false                  // the changelog does not hold the state: reconcile [0, end) and dump it
	wipe := func(why string) error {
		if lok || pok {
			log.Warn("dropping the local state: "+why, "persisted", commit.Checkpoints(lcps))
		}
		lok, pok = false, false
		return p.cs.Reset()
	}
	var why string
	switch {
	case a.Committed >= 0 && ours && st.Changelog >= 0:
		c := st.Changelog
		resume, base = st.Stages, c
		log = log.With("committed_changelog_offset", c)
		switch {
		case c > end:
			return fmt.Errorf("%w: the group's commit says the state is the first %d offsets of the changelog, which ends at %d (was the changelog topic deleted or recreated? resetting the group's offsets starts the partition over with empty state)", ErrChangelogBehind, c, end)
		case lok && pok && local == c:
			why = "local state matches the committed checkpoint"
		case lok && local <= c && p.c.tombstonesKept(written):
			why = "local state is a prefix of the committed one: catching up"
			if err := p.readChangelog(ctx, local, c); err != nil {
				return err
			}
		case lok && pok && local > c && local == end && atOrAfter(lcps, st.Stages):
			why = "local state is ahead of the group's commit and the changelog ends with it (stopped after persisting, before committing)"
			resume, base = lcps, local
		case lok && local <= c:
			why = "local state is a prefix of the committed one but older than half the changelog's tombstone retention (deletions it missed may be compacted away): rebuilding from the changelog"
			if err := wipe("it is too old to catch up"); err != nil {
				return err
			}
			if err := p.readChangelog(ctx, 0, c); err != nil {
				return err
			}
		default:
			why = "local state does not match the committed checkpoint: rebuilding from the changelog"
			if err := wipe("another instance moved the partition on since it was written"); err != nil {
				return err
			}
			if err := p.readChangelog(ctx, 0, c); err != nil {
				return err
			}
		}
	case a.Committed >= 0 && ours:
		// Committed by a chain without a changelog (or before it had one).
		resume, seed = st.Stages, true
		if pok && atOrAfter(lcps, st.Stages) {
			why = "committed without a changelog; keeping the local state and writing it to the changelog"
			resume = lcps
		} else {
			why = "committed without a changelog and no usable local state; the changelog is made to hold an empty state"
			if err := wipe("it is older than the group's commit"); err != nil {
				return err
			}
		}
	case a.Committed >= 0:
		why = "the committed offset carries no positions of this chain (reset by a tool, or written by another program): every stage resumes at it with empty state"
		resume, seed = everyStageAt(names, a.Committed), true
		if a.Metadata != "" {
			log.Warn("commit metadata is not ours (written by another program or version)", "committed", a.Committed, "metadata_len", len(a.Metadata))
		}
		if err := wipe("the group's offset was reset"); err != nil {
			return err
		}
	case pok && lok && local == end:
		why = "nothing committed; the local state is the whole changelog"
		resume, base = lcps, local
	case pok && !lok && end == 0:
		why = "nothing committed; keeping the local state and writing it to an empty changelog"
		resume, seed = lcps, true
	default:
		why = "nothing committed: starting with empty state"
		if err := wipe("nothing was committed, and the changelog does not hold it"); err != nil {
			return err
		}
	}
	rs.setReason(why)
	log.Info("partition state: "+why, "resume", commit.Checkpoints(resume))

	if seed {
		base = 0
	}
	off, err := p.reconcile(ctx, base, end)
	if err != nil {
		return err
	}
	if seed {
		if off, err = p.seed(ctx, off); err != nil {
			return err
		}
	}
	if err := p.cs.FinishRestore(resume, off); err != nil {
		return fmt.Errorf("finish restore: %w", err)
	}
	p.clOffset = off
	if resume != nil {
		p.resumeAt(resume)
	}
	p.finishRestore(log, off)
	return nil
}

func (p *partitionRun) finishRestore(log interface{ Info(string, ...any) }, off int64) {
	rs := &p.restored
	now := time.Now()
	rs.finished.Store(now.UnixNano())
	rs.phase.Store(phaseDone)
	s := rs.stats(now)
	rate := 0.0
	if secs := s.Duration.Seconds(); secs > 0 {
		rate = float64(s.Records) / secs
	}
	log.Info("partition state restored", "records", s.Records, "bytes", s.Bytes, "appended", s.Appended,
		"seconds", s.Duration.Seconds(), "records_per_second", int64(rate), "changelog_offset", off)
}

// atOrAfter reports whether every stage of a is at or after b's position:
// a's completed set (below Next, and Above) holds b's.
func atOrAfter(a, b []commit.Checkpoint) bool {
	for i := range a {
		if a[i].Next < b[i].Next {
			return false
		}
		for _, o := range b[i].Above {
			if _, ok := slices.BinarySearch(a[i].Above, o); o >= a[i].Next && !ok {
				return false
			}
		}
	}
	return true
}

func everyStageAt(names []string, off int64) []commit.Checkpoint {
	cps := make([]commit.Checkpoint, len(names))
	for i, n := range names {
		cps[i] = commit.Checkpoint{Stage: n, Next: off}
	}
	return cps
}

// readChangelog applies the changelog's records in [from, to) to the local
// state, one store batch per fetch.
func (p *partitionRun) readChangelog(ctx context.Context, from, to int64) error {
	rs := &p.restored
	rs.phase.Store(phaseReading)
	rs.from.Store(from)
	rs.to.Store(to)
	rs.pos.Store(from)
	err := p.clp.Read(ctx, from, to, func(recs []ChangelogRecord) error {
		next := recs[len(recs)-1].Offset + 1
		if err := p.cs.Restore(recs, next); err != nil {
			return err
		}
		n := 0
		for i := range recs {
			n += len(recs[i].Key) + len(recs[i].Value)
		}
		rs.records.Add(int64(len(recs)))
		rs.bytes.Add(int64(n))
		rs.pos.Store(next)
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore from the changelog [%d, %d): %w", from, to, err)
	}
	rs.pos.Store(to)
	return nil
}

// reconcile cancels the changelog's records in [from, to), which no commit
// covers: it appends, for each of their keys, the local state's value (or a
// tombstone). It returns the changelog offset of the local state afterwards.
func (p *partitionRun) reconcile(ctx context.Context, from, to int64) (int64, error) {
	if from >= to {
		return from, nil
	}
	rs := &p.restored
	rs.phase.Store(phaseReconciling)
	rs.from.Store(from)
	rs.to.Store(to)
	rs.pos.Store(from)
	p.log.Info("cancelling changelog records no commit covers", "from", from, "to", to)
	off := to
	err := p.clp.Read(ctx, from, to, func(recs []ChangelogRecord) error {
		seen := make(map[string]bool, len(recs))
		keys := make([][]byte, 0, len(recs))
		for i := range recs {
			if k := string(recs[i].Key); !seen[k] {
				seen[k] = true
				keys = append(keys, []byte(k))
			}
		}
		comp, err := p.cs.Compensate(keys)
		if err != nil {
			return err
		}
		if off, err = p.clp.Append(ctx, comp); err != nil {
			return err
		}
		rs.appended.Add(int64(len(comp)))
		rs.pos.Store(recs[len(recs)-1].Offset + 1)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile the changelog [%d, %d): %w", from, to, err)
	}
	return off, nil
}

// seed appends every entry of the local state to the changelog (after
// reconcile made every earlier key say what the local state says) and
// returns the changelog offset after them.
func (p *partitionRun) seed(ctx context.Context, off int64) (int64, error) {
	rs := &p.restored
	rs.phase.Store(phaseSeeding)
	err := p.cs.Snapshot(func(recs []ChangelogRecord) error {
		if len(recs) == 0 {
			return nil
		}
		var err error
		if off, err = p.clp.Append(ctx, recs); err != nil {
			return err
		}
		rs.appended.Add(int64(len(recs)))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("seed the changelog with the local state: %w", err)
	}
	return off, nil
}

// openChangelog binds the partition to its changelog; the restore runs in
// run.
func (p *partitionRun) openChangelog(a Assignment) error {
	cs, clp, err := p.c.followChangelog(p.ps, a.Topic, a.Partition)
	if err != nil {
		return err
	}
	p.cs, p.clp, p.assigned = cs, clp, a
	return nil
}

// followChangelog is ps as a ChangelogStore and the changelog of its
// partition, for a running partition and a standby alike.
func (c *Chain) followChangelog(ps PartitionStore, topic string, partition int32) (ChangelogStore, ChangelogPartition, error) {
	cs, ok := ps.(ChangelogStore)
	if !ok {
		return nil, nil, fmt.Errorf("the store's partitions (%T) cannot follow a changelog: they do not implement chain.ChangelogStore", ps)
	}
	clp, err := c.cfg.changelog.Partition(topic, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("open changelog: %w", err)
	}
	return cs, clp, nil
}

// persistWithChangelog is a checkpoint's store half with a changelog: the
// checkpoint's state changes are appended to the changelog and acknowledged
// before one batch persists state, positions and the changelog offset. It
// returns that offset.
//
// The append runs on a context that a stop does not cancel (bounded by the
// shutdown timeout): an append cut short leaves records that no commit
// covers, which is harmless (the next checkpoint appends a superset of them,
// and a restore cancels any left at the end) but needless.
func (p *partitionRun) persistWithChangelog(ctx context.Context, cps []commit.Checkpoint, evict time.Time) (int64, error) {
	pc, err := p.cs.PrepareCheckpoint(cps, evict)
	if err != nil {
		return 0, fmt.Errorf("persist checkpoint: %w", err)
	}
	off := p.clOffset
	if recs := pc.Records(); len(recs) > 0 {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.c.cfg.shutdownTimeout)
		off, err = p.clp.Append(actx, recs)
		cancel()
		if err != nil {
			pc.Abort()
			return 0, fmt.Errorf("append %d state changes to the changelog: %w", len(recs), err)
		}
	}
	if err := pc.Commit(off); err != nil {
		return 0, fmt.Errorf("persist checkpoint: %w", err)
	}
	p.clOffset = off
	return off, nil
}
