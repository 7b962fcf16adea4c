package chain

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/differential-dev/differential/commit"
)

// gapLog is the partition's idle release rule over the log (DESIGN.md
// "Idle release"): the offsets L after which the log shows its leader
// idle. L is in it when the next record the fetcher delivered after L has
// a Kafka timestamp more than IdleTimeout after L's, or — at the live
// tail — when no record followed L and the log's end was confirmed after
// L's timestamp + IdleTimeout (tailGap). A follower's record at offset o
// is then processed as of at most H(o) = 1 + the first L ≥ o: a leader
// write at an offset ≥ H(o) must not influence it, and the gate may
// release it once its leader completed everything below H(o) (the leader
// is idle there). Both are functions of the log alone, so live
// processing, a restart, a move, an exactly-once rewind and a re-run from
// offset 0 decide alike — except a tail entry, which the next record's
// timestamp may not confirm (CreateTime behind the engine's clock). Every
// tail entry is therefore recorded (DESIGN.md "Recorded idle releases"):
// it goes into the partition's commit metadata (in exactly-once mode the
// transaction's), and a restored partition seeds its gap log with the
// recorded entries, so a restart, a move and a rewind apply the decision
// instead of deciding again. In at-least-once mode outputs leave before
// the commit, so a tail entry is used only once a commit carrying it was
// acknowledged (decideTail, durable); in exactly-once mode the transaction
// that carries a released record's outputs carries the entry too.
//
// The fetcher appends in offset order (note), so every gap below the
// fetched end is known; entries below the committed offset are trimmed
// (no stage processes a record below it again, not even after an
// exactly-once rewind). A gap is found with one atomic load when there is
// none at or after o (the common case on a busy log).
type gapLog struct {
	it time.Duration
	mu sync.Mutex
	// The last record the fetcher delivered (have: there was one).
	have    bool
	lastOff int64
	lastTS  time.Time
	// gaps holds the offsets L in increasing order; tail says the last
	// entry came from a tail confirmation (not yet seen in the log).
	gaps []int64
	tail bool
	// top is the largest entry (-1: none), read without the lock.
	top atomic.Int64
	// unconfirmed counts tail entries the next record's timestamp did not
	// confirm.
	unconfirmed atomic.Int64
	log         func(off int64, gap time.Duration)
	// committed is the partition's committed offset: note trims below it
	// when the list has grown (exactly-once mode has no commit loop).
	committed func() int64

	// recorded are the tail entries decided live (or restored from the
	// commit metadata) at or above the committed offset, After
	// increasing: each is also in gaps. pending is an at-least-once tail
	// decision not yet in a commit Kafka acknowledged (not in gaps: no
	// record may be released or processed against it yet); durableC is
	// closed when it is. room is closed (and replaced) when recorded
	// shrinks, for a tail decision waiting for room (cap).
	recorded []commit.IdleRelease
	pending  *commit.IdleRelease
	durableC chan struct{}
	room     chan struct{}
	// cap is how many recorded entries the metadata carries
	// (commit.IdleReleaseCap); 0: none (too many stages, or
	// WithoutRecordedIdleReleases), tail entries are then used unrecorded.
	cap int
}

// gapTrimAt is the length at which note trims the list below the
// committed offset.
const gapTrimAt = 4096

func newGapLog(it time.Duration, stages int, record bool, committed func() int64, log func(off int64, gap time.Duration)) *gapLog {
	g := &gapLog{it: it, log: log, committed: committed, room: make(chan struct{})}
	if record {
		g.cap = commit.IdleReleaseCap(stages)
	}
	g.top.Store(-1)
	return g
}

// note records the gaps recs (fetched, in offset order) show. Records at
// or below the last one seen (a refetch after an exactly-once rewind) are
// skipped: the log is the same, so are its gaps.
func (g *gapLog) note(recs []Record) {
	if len(recs) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		if g.have && r.Offset <= g.lastOff {
			continue
		}
		if g.have {
			gap := r.Timestamp.Sub(g.lastTS)
			switch {
			case g.tail && g.has(g.lastOff):
				g.tail = false
				if gap <= g.it {
					g.unconfirmed.Add(1)
					if g.log != nil {
						g.log(g.lastOff, gap)
					}
				}
			case gap > g.it:
				g.addLocked(g.lastOff)
			}
		}
		g.have, g.lastOff, g.lastTS = true, r.Offset, r.Timestamp
	}
	if len(g.gaps) >= gapTrimAt && g.committed != nil {
		g.trimLocked(g.committed())
	}
}

// addLocked enters l; entries restored from the metadata may lie above
// the ones the fetcher finds, so it inserts in order.
func (g *gapLog) addLocked(l int64) {
	n := len(g.gaps)
	if n == 0 || g.gaps[n-1] < l {
		g.gaps = append(g.gaps, l)
		g.top.Store(l)
		return
	}
	if i, found := slices.BinarySearch(g.gaps, l); !found {
		g.gaps = slices.Insert(g.gaps, i, l)
	}
}

func (g *gapLog) has(l int64) bool {
	_, found := slices.BinarySearch(g.gaps, l)
	return found
}

// last is the last record the fetcher delivered.
func (g *gapLog) last() (off int64, ts time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastOff, g.lastTS, g.have
}

// addTail enters the tail entry at off (the last record delivered; its end
// was confirmed after its timestamp + IdleTimeout) unrecorded: for chains
// whose metadata has no room for it (cap 0).
func (g *gapLog) addTail(off int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.have || off != g.lastOff {
		return
	}
	if n := len(g.gaps); n == 0 || g.gaps[n-1] < off {
		g.addLocked(off)
		g.tail = true
	}
}

// decideTail is a tail decision r (r.After the last record delivered) of
// a partition whose commits carry it. It reports whether r is in the gap
// log now; when not, answer is closed when that may have changed: the
// commit carrying it was acknowledged (at-least-once: r waits as pending
// unless immediate), or the recorded entries shrank below the cap.
func (g *gapLog) decideTail(r commit.IdleRelease, immediate bool) (ok bool, answer <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.has(r.After) {
		return true, nil
	}
	if g.pending != nil {
		return false, g.durableC
	}
	if !g.have || r.After != g.lastOff {
		return false, nil // a record arrived: the caller asks again
	}
	if g.committed != nil {
		g.dropRecordedLocked(g.committed())
	}
	if len(g.recorded) >= g.cap {
		return false, g.room
	}
	if immediate {
		g.enterLocked(r)
		return true, nil
	}
	g.pending = &r
	g.durableC = make(chan struct{})
	return false, g.durableC
}

// enterLocked enters a recorded decision into the gap log.
func (g *gapLog) enterLocked(r commit.IdleRelease) {
	g.addLocked(r.After)
	i, found := slices.BinarySearchFunc(g.recorded, r.After, func(x commit.IdleRelease, a int64) int {
		return cmpInt64(x.After, a)
	})
	if !found {
		g.recorded = slices.Insert(g.recorded, i, r)
	}
	if g.have && r.After == g.lastOff {
		g.tail = true
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// forCommit returns the recorded decisions a commit at offset off carries
// (After >= off), with the pending one, which it returns too (nil: none)
// for durable once the commit is acknowledged; a pending decision below
// off is void and dropped. Decisions are dropped only
// below the offset last committed: no stage processes a record at or
// below them again, not after a restart, nor after an exactly-once
// rewind (this commit may abort).
func (g *gapLog) forCommit(off int64) (rs []commit.IdleRelease, pending *commit.IdleRelease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.committed != nil {
		g.dropRecordedLocked(g.committed())
	}
	i := 0
	for i < len(g.recorded) && g.recorded[i].After < off {
		i++
	}
	rs = slices.Clone(g.recorded[i:])
	if p := g.pending; p != nil {
		if p.After < off {
			// Every stage passed the decision (records arrived and the
			// ordinary rule released them): no commit carries it, and no
			// stage will ask for it again. It is void; a tail decision
			// waiting behind it asks again.
			g.pending = nil
			close(g.durableC)
			g.durableC = nil
		} else {
			i, _ := slices.BinarySearchFunc(rs, p.After, func(x commit.IdleRelease, a int64) int { return cmpInt64(x.After, a) })
			rs = slices.Insert(rs, i, *p)
			pending = p
		}
	}
	if len(rs) == 0 {
		rs = nil
	}
	return rs, pending
}

// durable enters the pending decision p once a commit carrying it was
// acknowledged: from now on a restart applies it, so the live run may
// too. It is entered even if records arrived since (they did not confirm
// it, or the log would show the gap): it is the partition's decision now.
func (g *gapLog) durable(p *commit.IdleRelease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending != p {
		return
	}
	g.enterLocked(*p)
	g.pending = nil
	close(g.durableC)
	g.durableC = nil
}

// seed enters the decisions restored from the commit metadata.
func (g *gapLog) seed(rs []commit.IdleRelease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range rs {
		g.enterLocked(r)
	}
}

// dropRecordedLocked forgets the recorded decisions below off and wakes a
// tail decision waiting for room.
func (g *gapLog) dropRecordedLocked(off int64) {
	i := 0
	for i < len(g.recorded) && g.recorded[i].After < off {
		i++
	}
	if i == 0 {
		return
	}
	g.recorded = append(g.recorded[:0], g.recorded[i:]...)
	close(g.room)
	g.room = make(chan struct{})
}

// recordedReleases returns the recorded decisions (for tests and Stats).
func (g *gapLog) recordedReleases() []commit.IdleRelease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.recorded)
}

// first returns the first entry ≥ o.
func (g *gapLog) first(o int64) (int64, bool) {
	if g.top.Load() < o {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.gaps), func(i int) bool { return g.gaps[i] >= o })
	if i == len(g.gaps) {
		return 0, false
	}
	return g.gaps[i], true
}

// known reports whether the log has shown whether its leader is idle
// after o: the record after o was delivered (its timestamp decides), or o
// is an entry (a tail decision).
func (g *gapLog) known(o int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.have && g.lastOff > o || g.has(o)
}

// horizonKnown reports whether a follower may take H(o) from the gap log
// now. Live, a follower's leader has processed only records the fetcher
// delivered, so when the record after o is not delivered yet the leader's
// state holds nothing past o and any horizon reads the same. After a
// restart or an exactly-once rewind the leader resumes where it was, and
// its state holds its writes of records up to restoredEnd, which this run
// may not have fetched yet: a record below restoredEnd − 1 then needs the
// record after it (or a tail decision) before its horizon is known.
func (p *partitionRun) horizonKnown(o int64) bool {
	return o+1 >= p.restoredEnd || p.gaps.known(o)
}

// awaitHorizon waits until horizonKnown(o): for the fetcher (or a
// polling follower) to deliver the record after o, or — when the log holds
// nothing more — for the tail decision that the leader is idle after o.
func (s *stageRun) awaitHorizon(ctx context.Context, o int64) error {
	p := s.p
	for !p.horizonKnown(o) {
		ch := p.ring.Changed()
		select {
		case <-ch:
			ch = nil // closed ring: nothing more will be appended
		default:
		}
		if p.horizonKnown(o) {
			return nil
		}
		ok, at, answer := p.tailGap(ctx, s)
		if ok {
			continue
		}
		if err := waitFor(ctx, ch, at, answer); err != nil {
			return err
		}
	}
	return nil
}

// waitFor blocks until ch fires, the time at comes (never when zero),
// answer closes, or ctx ends (its error).
func waitFor(ctx context.Context, ch <-chan struct{}, at time.Time, answer <-chan struct{}) error {
	var tc <-chan time.Time
	if !at.IsZero() {
		timer := time.NewTimer(time.Until(at))
		defer timer.Stop()
		tc = timer.C
	}
	select {
	case <-ch:
	case <-tc:
	case <-answer:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// horizon is the idle horizon of offset o: 1 + the first entry ≥ o, or
// math.MaxInt64 when none is known (then, for a record the gate released,
// none lies below the leader position its rule needed). A follower's
// record is processed as of the smaller of it and that position
// (gateHorizon, Context.Horizon).
func (g *gapLog) horizon(o int64) int64 {
	if l, ok := g.first(o); ok {
		return l + 1
	}
	return math.MaxInt64
}

// trim forgets the entries below off.
func (g *gapLog) trim(off int64) {
	if g.top.Load() < 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trimLocked(off)
}

func (g *gapLog) trimLocked(off int64) {
	i := sort.Search(len(g.gaps), func(i int) bool { return g.gaps[i] >= off })
	if i > 0 {
		g.gaps = append(g.gaps[:0], g.gaps[i:]...)
	}
	g.dropRecordedLocked(off)
}

// tailGap asks whether the log shows its leader idle after the last record
// the fetcher delivered, L: no record followed it and — when the Source is
// an EndConfirmer — a confirmation asked after L's timestamp + IdleTimeout
// (see the deadline below for clocks that disagree) found
// nothing in the log past what was fetched but offsets Fetch never
// delivers (markers, aborted or still open transactions). Then L enters
// the gap log and ok is true. A leader's record must not be released
// against it unless the leader has read (partition scope: completed) L,
// so callers ask only once it has read everything fetched.
//
// When not yet, it says what to wait for besides the leader's progress:
// at, when non-zero, is when to ask again (the deadline, or the retry of a
// check that found more or failed); answer, when non-nil, is closed when
// the check in flight answers. A check asked here runs on a goroutine of
// p.closers under ctx.
//
// The high watermark alone cannot decide it: a transactional input keeps
// it above the last record for ever (a commit marker; under read_committed
// also an aborted or open transaction's records), so "high watermark ≤
// fetched" would stall the tail, and "high watermark − fetched ≤ markers"
// cannot be computed without reading the log past what was fetched — which
// is what the check does. Nor can a high watermark seen earlier decide it:
// only one read after the deadline shows that nothing arrived in the log —
// not merely at this fetcher — for IdleTimeout.
func (p *partitionRun) tailGap(ctx context.Context, s *stageRun) (ok bool, at time.Time, answer <-chan struct{}) {
	last, ts, have := p.gaps.last()
	if !have {
		return false, time.Time{}, nil
	}
	if l, found := p.gaps.first(last); found && l == last {
		return true, time.Time{}, nil
	}
	high := p.ring.High()
	if high != last+1 {
		return false, time.Time{}, nil // the ring is behind the gap log (its fetcher's next batch)
	}
	it := p.c.cfg.idleTimeout
	// After L's timestamp + IdleTimeout, and at least IdleTimeout after
	// L reached this fetcher (a timestamp far behind this clock, e.g.
	// CreateTime of old events, must not release a burst still arriving);
	// a timestamp ahead of this clock is waited for up to IdleTimeout more,
	// so a producer or broker clock far ahead cannot stall the tail.
	la := p.ring.LastAppend()
	deadline := la
	if ts.After(la) {
		deadline = ts
		if lim := la.Add(it); deadline.After(lim) {
			deadline = lim
		}
	}
	deadline = deadline.Add(it)
	now := time.Now()
	if now.Before(deadline) {
		return false, deadline, nil
	}
	ec, isEC := p.src.(EndConfirmer)
	if !isEC {
		return p.decideTail(s, last)
	}
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asking != nil {
		return false, time.Time{}, c.asking
	}
	if c.answered && c.from == high && !c.asked.Before(deadline) {
		if c.err == nil && !c.more {
			return p.decideTail(s, last)
		}
		if expires := c.at.Add(it); now.Before(expires) {
			return false, expires, nil // more to fetch (a stalled fetcher), or failed: ask again then
		}
	}
	return false, time.Time{}, p.askEndLocked(ctx, ec, high, now)
}

// decideTail takes the tail decision that the leader of s is idle after
// last: recorded (gapLog.decideTail) — at once in exactly-once mode, where
// the transaction carrying the released records' outputs carries it; in
// at-least-once mode once a commit carrying it is acknowledged, which it
// asks of the commit loop now — or, when the metadata has no room for
// decisions, unrecorded.
func (p *partitionRun) decideTail(s *stageRun, last int64) (ok bool, at time.Time, answer <-chan struct{}) {
	if p.gaps.cap == 0 {
		p.gaps.addTail(last)
		return true, time.Time{}, nil
	}
	r := commit.IdleRelease{Stage: s.name, After: last, LeaderNext: last + 1}
	if s.leader != nil {
		// Under the key-scoped gate the leader has read everything
		// fetched and may not have completed it yet: its read frontier
		// is past last, its position perhaps not.
		ln, lwm := s.leader.cp.load()
		r.LeaderNext, r.LeaderWatermark = max(ln, last+1), lwm
	}
	ok, answer = p.gaps.decideTail(r, p.c.tc != nil)
	if !ok && answer != nil && p.c.tc == nil {
		p.kickCommit()
	}
	return ok, time.Time{}, answer
}

// kickCommit asks the commit loop to checkpoint now (a tail decision
// waits for a commit carrying it).
func (p *partitionRun) kickCommit() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// endCheck is a partition's confirmation that its log holds nothing the
// fetcher has not delivered (EndConfirmer): at most one is asked at a time,
// and the last answer is kept for the idle release (valid for IdleTimeout
// after it came) and for Stats (the lag of a stage at a transactional
// tail).
type endCheck struct {
	mu sync.Mutex
	// asking is closed when the check in flight answers; nil when none is.
	asking chan struct{}
	// The last answer: the fetched end it was asked about, when it was
	// asked and answered, and what it said.
	answered  bool
	from      int64
	asked, at time.Time
	end       int64
	more      bool
	err       error
}

// askEndLocked starts a check of the log past from (c.mu held) and returns
// the channel closed at its answer.
func (p *partitionRun) askEndLocked(ctx context.Context, ec EndConfirmer, from int64, now time.Time) <-chan struct{} {
	c := &p.endCheck
	done := make(chan struct{})
	c.asking = done
	p.closers.Go(func() {
		end, more, err := ec.ConfirmEnd(ctx, from)
		if err != nil && ctx.Err() == nil {
			p.log.Debug("the idle release's end check failed; asking again after the idle timeout", "from", from, "err", err)
		}
		c.mu.Lock()
		c.answered, c.from, c.asked, c.at = true, from, now, time.Now()
		c.end, c.more, c.err = end, more, err
		c.asking = nil
		c.mu.Unlock()
		close(done)
	})
	return done
}

// checkQuietTail asks the log's end once per fetched end when the whole
// partition has been caught up with what it fetched for IdleTimeout
// (every stage's position ≥ ring.High()) while the source's high watermark
// is beyond it — a transactional tail, or a stalled fetcher — so that
// Stats can tell the two apart even when no follower waits (a one-stage
// chain, or followers that were released): the stages' lag is then zero
// at a tail of markers, and stays positive behind a stalled fetcher. The
// commit loop calls it.
func (p *partitionRun) checkQuietTail(ctx context.Context) {
	ec, ok := p.src.(EndConfirmer)
	if !ok {
		return
	}
	high := p.ring.High()
	if p.src.HighWatermark() <= high {
		return
	}
	for _, s := range p.stages {
		if s.cp.next.Load() < high {
			return
		}
	}
	now := time.Now()
	if now.Before(p.ring.LastAppend().Add(p.c.cfg.idleTimeout)) {
		return
	}
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asking != nil || c.answered && c.from == high && (c.err == nil || now.Before(c.at.Add(p.c.cfg.idleTimeout))) {
		return // asked (and answered, or failed recently) for this end
	}
	p.askEndLocked(ctx, ec, high, now)
}

// confirmedEnd is the last answer that found nothing to fetch past from:
// the log up to end holds nothing Fetch delivers at or after from (ok
// false: none).
func (p *partitionRun) confirmedEnd() (from, end int64, ok bool) {
	c := &p.endCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.answered || c.err != nil || c.more {
		return 0, 0, false
	}
	return c.from, c.end, true
}

// stageLag is a stage's lag at position next against the high watermark
// hwm (≥ 0): hwm − next, except that a stage that completed everything
// fetched, past which the log was confirmed to hold nothing to deliver up
// to end (markers, aborted records), counts as at end.
func stageLag(hwm, next, from, end int64, confirmed bool) int64 {
	if confirmed && next >= from {
		next = max(next, end)
	}
	return max(hwm-next, 0)
}
