package chain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/commit"
)

func gapRecs(t0 time.Time, offs ...int64) []Record {
	recs := make([]Record, len(offs))
	for i, o := range offs {
		recs[i] = Record{Offset: o, Timestamp: t0.Add(time.Duration(o) * time.Millisecond)}
	}
	return recs
}

// Restored decisions above what the fetcher has seen stay in order when
// the log's own gaps below them are found; the horizon of a record
// before a restored decision is the position past it.
func TestGapLogSeededAboveTheFetch(t *testing.T) {
	committed := int64(0)
	g := newGapLog(time.Second, 2, true, func() int64 { return committed }, nil)
	g.seed([]commit.IdleRelease{{Stage: "b", After: 7, LeaderNext: 8}})
	t0 := time.Unix(1000, 0)
	recs := gapRecs(t0, 0, 1, 2)
	recs[2].Timestamp = t0.Add(5 * time.Second) // a gap in the log after 1
	g.note(recs)
	require.Equal(t, []int64{1, 7}, g.gaps)
	require.Equal(t, int64(2), g.horizon(0))
	require.Equal(t, int64(8), g.horizon(2))
	rs, pending := g.forCommit(3)
	require.Nil(t, pending)
	require.Equal(t, []commit.IdleRelease{{Stage: "b", After: 7, LeaderNext: 8}}, rs)
	committed = 8
	g.trim(committed)
	require.Empty(t, g.recordedReleases(), "dropped once the committed offset passed it")
}

// At-least-once: a tail decision is not in the gap log until a commit
// carrying it is acknowledged; at most cap decisions wait above the
// committed offset, and a commit past one makes room.
func TestGapLogTailDecisionWaitsForItsCommit(t *testing.T) {
	committed := int64(0)
	g := newGapLog(time.Second, 2, true, func() int64 { return committed }, nil)
	t0 := time.Unix(1000, 0)
	next := int64(0)
	for k := range g.cap + 1 {
		g.note(gapRecs(t0, next))
		r := commit.IdleRelease{Stage: "b", After: next, LeaderNext: next + 1}
		ok, answer := g.decideTail(r, false)
		if k == g.cap {
			require.False(t, ok)
			select {
			case <-answer:
				t.Fatal("room before a commit passed a decision")
			default:
			}
			rs, _ := g.forCommit(0)
			require.Len(t, rs, g.cap, "the metadata carries at most cap decisions")
			committed = 1
			g.trim(committed)
			<-answer // room
			ok, answer = g.decideTail(r, false)
		}
		require.False(t, ok, "pending until committed")
		_, found := g.first(next)
		require.False(t, found, "no record is released or processed against it yet")
		rs, pending := g.forCommit(committed)
		require.NotNil(t, pending)
		require.Equal(t, r, rs[len(rs)-1])
		g.durable(pending)
		<-answer
		ok, _ = g.decideTail(r, false)
		require.True(t, ok)
		require.Equal(t, next+1, g.horizon(next))
		next += 1
	}
}

// At-least-once: a pending tail decision that every stage passed before a
// commit carried it (records arrived and the ordinary rule released them)
// is void: the next commit drops it and wakes a tail decision waiting
// behind it, which is then taken for the new tail.
func TestGapLogPendingDecisionOvertakenByRecords(t *testing.T) {
	committed := int64(0)
	g := newGapLog(time.Second, 2, true, func() int64 { return committed }, nil)
	t0 := time.Unix(1000, 0)
	g.note(gapRecs(t0, 0))
	ok, first := g.decideTail(commit.IdleRelease{Stage: "b", After: 0, LeaderNext: 1}, false)
	require.False(t, ok)
	g.note(gapRecs(t0, 1, 2, 3)) // no gap: the stages pass 0 by the ordinary rule
	r := commit.IdleRelease{Stage: "b", After: 3, LeaderNext: 4}
	ok, answer := g.decideTail(r, false)
	require.False(t, ok, "waits behind the pending decision")
	rs, pending := g.forCommit(2)
	require.Nil(t, pending, "a decision below the commit's offset is not carried")
	require.Nil(t, rs)
	for _, ch := range []<-chan struct{}{first, answer} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter behind the void decision is not woken")
		}
	}
	ok, answer = g.decideTail(r, false)
	require.False(t, ok, "the new tail decision is pending")
	rs, pending = g.forCommit(2)
	require.Equal(t, []commit.IdleRelease{r}, rs)
	g.durable(pending)
	<-answer
	ok, _ = g.decideTail(r, false)
	require.True(t, ok)
}
