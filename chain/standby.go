package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/differential-dev/differential/commit"
)

// ErrPartitionRunning is returned by OpenStandby for a partition that this
// chain runs (or is starting): its state is the running partition's.
var ErrPartitionRunning = errors.New("chain: the partition runs here")

// ErrStandbyClosed is returned by Standby.CatchUp once the standby was
// closed, by its owner or because the partition started running here.
var ErrStandbyClosed = errors.New("chain: standby closed")

// Standby keeps a warm copy of the state of a partition this chain does
// not run: it applies the partition's changelog to the local store up to
// the group's committed changelog offset, so that when the partition is
// assigned here its restore reads only the records committed since the
// last CatchUp ("local state is a prefix of the committed one: catching
// up", see restoreFromChangelog).
//
// It never applies a record at or past the committed changelog offset:
// those may belong to a checkpoint that no commit covers, which the next
// owner cancels. So the local state is always a prefix of the changelog
// that some commit covered, which is all a restore needs of it.
//
// RunPartition of the same partition takes the partition over: it
// interrupts a CatchUp in progress (what it applied stays), closes the
// standby and then opens the partition itself.
type Standby struct {
	c      *Chain
	k      partKey
	ps     PartitionStore
	cs     ChangelogStore
	clp    ChangelogPartition
	closed chan struct{} // closed when the partition takes it over or Close

	mu struct {
		sync.Mutex
		cancel context.CancelFunc // of the CatchUp in progress
		done   bool
	}
	// serial: one CatchUp or Close at a time.
	serial sync.Mutex
}

// StandbyStats describes one CatchUp.
type StandbyStats struct {
	// Committed is the group's committed changelog offset the standby
	// caught up to; -1 when the commit names none (nothing committed, a
	// commit without a changelog, or metadata of another program).
	Committed int64
	// From is the changelog offset the read started at, Records the
	// records applied (0 when the local state was already there).
	From, Records int64
	// Rebuilt: the local state did not continue the committed history
	// (none, another history, or too old for the changelog's tombstone
	// retention) and was read again from offset 0.
	Rebuilt bool
	// Duration is how long the CatchUp took.
	Duration time.Duration
}

// FollowsChangelog reports whether the chain's state follows its
// partitions through a changelog (WithChangelog), which standbys need.
func (c *Chain) FollowsChangelog() bool { return c.cfg.changelog != nil && c.cfg.store != nil }

// Starting reports whether a partition this chain was given has not
// started its stages yet (it is opening its state or restoring it): a
// standby's catch-up can wait, the partition's own restore should not
// share the cores with it.
func (c *Chain) Starting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.mu.claimed {
		p := c.mu.parts[k]
		if p == nil || c.cfg.changelog != nil && p.restored.phase.Load() != phaseDone {
			return true
		}
	}
	return false
}

// OpenStandby opens a standby of a partition that this chain does not run.
// The chain needs a changelog (WithChangelog) and a store.
func (c *Chain) OpenStandby(topic string, partition int32) (*Standby, error) {
	if !c.FollowsChangelog() {
		return nil, errors.New("chain: a standby needs a changelog and a store (WithChangelog, WithStore)")
	}
	k := partKey{topic, partition}
	c.mu.Lock()
	if c.mu.claimed[k] > 0 {
		c.mu.Unlock()
		return nil, ErrPartitionRunning
	}
	if c.mu.standby[k] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("chain: %s/%d already has a standby", topic, partition)
	}
	s := &Standby{c: c, k: k, closed: make(chan struct{})}
	// Held until the state is open: a RunPartition that closes the
	// standby meanwhile waits for it.
	s.serial.Lock()
	c.mu.standby[k] = s
	c.mu.Unlock()
	ps, err := c.openState(topic, partition)
	if err == nil {
		s.ps = ps
		s.cs, s.clp, err = c.followChangelog(ps, topic, partition)
	}
	s.serial.Unlock()
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("chain: standby of %s/%d: %w", topic, partition, err)
	}
	return s, nil
}

// CatchUp brings the local state to the changelog offset that the group's
// commit (committed offset and its metadata, as the partition's next owner
// would read them) names. A cancelled ctx, or the partition starting here,
// stops it; what it applied stays and the next CatchUp goes on from there.
func (s *Standby) CatchUp(ctx context.Context, committed int64, metadata string) (st StandbyStats, err error) {
	s.serial.Lock()
	defer s.serial.Unlock()
	st.Committed = -1
	start := time.Now()
	defer func() { st.Duration = time.Since(start) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.mu.done {
		s.mu.Unlock()
		return st, ErrStandbyClosed
	}
	s.mu.cancel = cancel
	s.mu.Unlock()

	if committed < 0 {
		return st, nil
	}
	cs, ours := commit.DecodeState(metadata, committed, s.c.names)
	if !ours || cs.Changelog < 0 {
		return st, nil
	}
	c := cs.Changelog
	st.Committed = c
	local, written, lok, err := s.cs.ChangelogOffset()
	if err != nil {
		return st, fmt.Errorf("local changelog offset: %w", err)
	}
	if lok && local == c {
		st.From = c
		return st, nil
	}
	end, err := s.clp.End(ctx)
	if err != nil {
		return st, s.stopped(fmt.Errorf("changelog end offset: %w", err))
	}
	if c > end {
		return st, fmt.Errorf("%w: the group's commit names changelog offset %d, the changelog ends at %d", ErrChangelogBehind, c, end)
	}
	from := local
	if !lok || local > c || !s.c.tombstonesKept(written) {
		// Not a prefix of the committed history (or one too old to catch
		// up): start over, as a restore would.
		if err := s.cs.Reset(); err != nil {
			return st, fmt.Errorf("reset the local state: %w", err)
		}
		from, st.Rebuilt = 0, true
	}
	st.From = from
	if from == c {
		return st, nil
	}
	err = s.clp.Read(ctx, from, c, func(recs []ChangelogRecord) error {
		if err := s.cs.Restore(recs, recs[len(recs)-1].Offset+1); err != nil {
			return err
		}
		st.Records += int64(len(recs))
		return nil
	})
	if err != nil {
		return st, s.stopped(fmt.Errorf("read the changelog [%d, %d): %w", from, c, err))
	}
	// The offset is c even when the last offsets hold no record
	// (compaction, transaction markers); synced, so that a crash of this
	// instance keeps the standby's progress.
	if err := s.cs.FinishRestore(nil, c); err != nil {
		return st, fmt.Errorf("record the changelog offset: %w", err)
	}
	return st, nil
}

// stopped is err, or ErrStandbyClosed when the standby was closed meanwhile.
func (s *Standby) stopped(err error) error {
	select {
	case <-s.closed:
		return ErrStandbyClosed
	default:
		return err
	}
}

// Close ends the standby; the local state stays. It waits for a CatchUp in
// progress to stop.
func (s *Standby) Close() error {
	s.mu.Lock()
	first := !s.mu.done
	s.mu.done = true
	if s.mu.cancel != nil {
		s.mu.cancel()
	}
	s.mu.Unlock()
	if first {
		close(s.closed)
	}
	s.serial.Lock()
	defer s.serial.Unlock()
	var errs []error
	if s.clp != nil {
		errs = append(errs, s.clp.Close())
		s.clp = nil
	}
	if s.ps != nil {
		errs = append(errs, s.ps.Close())
		s.ps = nil
	}
	s.c.mu.Lock()
	if s.c.mu.standby[s.k] == s {
		delete(s.c.mu.standby, s.k)
	}
	s.c.mu.Unlock()
	return errors.Join(errs...)
}

// claim marks k as run here (RunPartition) until the returned func is
// called, and closes its standby, if any, first.
func (c *Chain) claim(k partKey) (release func()) {
	c.mu.Lock()
	c.mu.claimed[k]++
	s := c.mu.standby[k]
	c.mu.Unlock()
	if s != nil {
		if err := s.Close(); err != nil {
			c.cfg.logger.Warn("closing the partition's standby", "topic", k.topic, "partition", k.partition, "err", err)
		}
	}
	return func() {
		c.mu.Lock()
		if c.mu.claimed[k]--; c.mu.claimed[k] == 0 {
			delete(c.mu.claimed, k)
		}
		c.mu.Unlock()
	}
}

// tombstonesKept reports whether every tombstone appended to the changelog
// since a local state written at written is still in it: Kafka's compaction
// drops a tombstone delete.retention.ms after it was written (at the
// earliest), and every record after the local state's offset was written
// after it. Half the retention is the margin for clocks.
func (c *Chain) tombstonesKept(written time.Time) bool {
	tr, ok := c.cfg.changelog.(TombstoneRetention)
	if !ok || tr.TombstoneRetention() <= 0 {
		return true
	}
	return time.Since(written) < tr.TombstoneRetention()/2
}
