package chain_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// tally is a two-stage chain whose outputs depend on state: "count" keeps a
// running count of its records per key, "mark" the offset of the key's
// previous mark. Each stage reads only its own keys, so the outputs are a
// function of the log alone, and a stage that lost its state answers
// differently.
func tally() []chain.Stage {
	stage := func(prefix string, next func(prev []byte, ok bool, o int64) []byte) chain.Processor {
		return chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			k := append([]byte(prefix), e.Key...)
			prev, ok, err := pc.State().Get(k)
			if err != nil {
				return err
			}
			v := next(prev, ok, e.Offset)
			if err := pc.State().Set(k, v, time.Time{}); err != nil {
				return err
			}
			pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s@%d %s=%s", pc.Stage(), e.Offset, e.Key, v)})
			return nil
		})
	}
	count := stage("n/", func(prev []byte, ok bool, _ int64) []byte {
		n, _ := strconv.Atoi(string(prev))
		return strconv.AppendInt(nil, int64(n+1), 10)
	})
	mark := stage("m/", func(prev []byte, ok bool, o int64) []byte {
		if !ok {
			prev = []byte("none")
		}
		return fmt.Appendf(nil, "%d(prev %s)", o, strings.SplitN(string(prev), "(", 2)[0])
	})
	return []chain.Stage{
		{Name: "count", Filter: typeFilter("click"), Processor: count},
		{Name: "mark", Filter: typeFilter("install"), Processor: mark},
	}
}

// tallyModel is what tally must output for a log, in offset order.
func tallyModel(recs []chain.Record) []string {
	counts, marks := map[string]int{}, map[string]string{}
	var out []string
	for _, r := range recs {
		typ, _, _ := strings.Cut(string(r.Value), "|")
		k := string(r.Key)
		switch typ {
		case "click":
			counts[k]++
			out = append(out, fmt.Sprintf("count@%d %s=%d", r.Offset, k, counts[k]))
		case "install":
			prev, ok := marks[k]
			if !ok {
				prev = "none"
			}
			marks[k] = strconv.FormatInt(r.Offset, 10)
			out = append(out, fmt.Sprintf("mark@%d %s=%d(prev %s)", r.Offset, k, r.Offset, prev))
		}
	}
	return out
}

// tallyRecords returns n records over a few keys, clicks and installs.
func tallyRecords(from, n int) []chain.Record {
	recs := make([]chain.Record, n)
	for i := range recs {
		typ := "click"
		if (from+i)%3 == 2 {
			typ = "install"
		}
		recs[i] = chaintest.Rec(fmt.Sprintf("u%d", (from+i)%7), ev(typ, from+i), base)
	}
	return recs
}

// sortedOutputs returns the tester's outputs ordered by stage then offset
// (the two stages' outputs interleave as they run).
func sortedOutputs(tt *chaintest.Tester) []string {
	var count, mark []string
	for _, m := range tt.Outputs("output") {
		if strings.HasPrefix(string(m.Value), "count@") {
			count = append(count, string(m.Value))
		} else {
			mark = append(mark, string(m.Value))
		}
	}
	return append(count, mark...)
}

func sortedModel(recs []chain.Record) []string {
	var count, mark []string
	for _, s := range tallyModel(recs) {
		if strings.HasPrefix(s, "count@") {
			count = append(count, s)
		} else {
			mark = append(mark, s)
		}
	}
	return append(count, mark...)
}

func restoreOf(t *testing.T, tt *chaintest.Tester) chain.RestoreStats {
	t.Helper()
	st := tt.Stats()
	require.Len(t, st, 1)
	return st[0].Restore
}

// The state follows the partition: moved to an instance with no local state
// (a new pod, or a deleted state directory), it is rebuilt from the
// changelog; moved back to the instance it left, whose local state is stale
// (another instance moved the partition on), it is caught up from the
// changelog, not reused as it is. Every output equals the model's, once.
func TestStateFollowsPartitionMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		var all []chain.Record
		feed := func(n int) {
			recs := tallyRecords(len(all), n)
			all = append(all, recs...)
			tt.Feed(0, recs...)
		}
		tt.Start(0)
		feed(40)
		assert.Equal(t, "nothing committed: starting with empty state", restoreOf(t, tt).Reason)

		require.NoError(t, tt.Move("b", 0))
		synctest.Wait()
		r := restoreOf(t, tt)
		assert.Equal(t, "local state does not match the committed checkpoint: rebuilding from the changelog", r.Reason)
		assert.Positive(t, r.Records, "b had no local state: everything came from the changelog")
		assert.False(t, r.Restoring)
		assert.Equal(t, "done", r.Phase)
		feed(40)

		require.NoError(t, tt.Move("a", 0))
		synctest.Wait()
		r = restoreOf(t, tt)
		assert.Equal(t, "local state is a prefix of the committed one: catching up", r.Reason, "a's state is stale")
		assert.Positive(t, r.Records)
		feed(40)

		require.NoError(t, tt.Move("a", 0)) // a restart in place
		synctest.Wait()
		r = restoreOf(t, tt)
		assert.Equal(t, "local state matches the committed checkpoint", r.Reason)
		assert.Zero(t, r.Records)
		feed(40)
		require.NoError(t, tt.Stop())

		require.Len(t, tt.Log(0).Records(), len(all))
		require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt), "every output once, as the model says")
		require.NotEmpty(t, cl.Records(0))
	})
}

// The commit metadata carries the changelog offset, the store records the
// same, and the changelog holds exactly the state: rebuilt from it alone,
// a fresh store equals the instance's.
func TestCommitCarriesTheChangelogOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 30)...)
		require.NoError(t, tt.Stop())

		cs := tt.Commits(0)
		require.NotEmpty(t, cs)
		last := cs[len(cs)-1]
		st, ok := commit.DecodeState(last.Metadata, last.Offset, []string{"count", "mark"})
		require.True(t, ok, "%q", last.Metadata)
		recs := cl.Records(0)
		require.Equal(t, recs[len(recs)-1].Offset+1, st.Changelog, "the commit covers the whole changelog")
		assert.Equal(t, int64(30), last.Offset)

		ps, err := tt.Instance("a").OpenPartition(chaintest.Topic, 0, []string{"count", "mark"})
		require.NoError(t, err)
		off, _, ok, err := ps.(chain.ChangelogStore).ChangelogOffset()
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, st.Changelog, off)
		require.NoError(t, ps.Close())

		local, err := tt.Instance("a").Entries(chaintest.Topic, 0)
		require.NoError(t, err)
		// Rebuild from the changelog alone.
		fresh := tt.Instance("rebuilt")
		ps, err = fresh.OpenPartition(chaintest.Topic, 0, []string{"count", "mark"})
		require.NoError(t, err)
		require.NoError(t, ps.(chain.ChangelogStore).Restore(recs, st.Changelog))
		require.NoError(t, ps.Close())
		rebuilt, err := fresh.Entries(chaintest.Topic, 0)
		require.NoError(t, err)
		assert.Equal(t, local, rebuilt)
		assert.Len(t, local, 14, "7 counts and 7 marks")
	})
}

// DESIGN.md "State that follows its partition" order: a record's state changes reach the changelog only
// once its outputs are acknowledged; the store's batch and the Kafka commit
// follow the changelog's acknowledgement, never precede it.
func TestCheckpointOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Second))
		cl := tt.UseChangelog()
		committedRecords := func() int64 {
			cs := tt.Commits(0)
			if len(cs) == 0 {
				return 0
			}
			return cs[len(cs)-1].Offset
		}
		persisted := func() map[string][]byte {
			e, err := tt.Instance("a").Entries(chaintest.Topic, 0)
			require.NoError(t, err)
			return e
		}
		tt.SetAckMode(chaintest.AckHold)
		tt.Start(0)
		tt.Append(0, tallyRecords(0, 6)...)
		time.Sleep(3 * time.Second) // three commit intervals of fake time
		synctest.Wait()
		assert.Empty(t, cl.Records(0), "no state change of a record whose outputs are unacknowledged")
		assert.Zero(t, committedRecords())
		assert.Empty(t, persisted())

		waiting, release := make(chan int), make(chan struct{})
		cl.BeforeAppend(func(_ int32, recs []chain.ChangelogRecord) {
			waiting <- len(recs)
			<-release
		})
		tt.Release(nil)
		tt.SetAckMode(chaintest.AckImmediately)
		// The next checkpoint — the one the idle release of mark@5 at the
		// tail asks for (it waits for a commit that records it), before
		// mark@5 runs — appends the state of the records acknowledged
		// so far (one key each)... and waits.
		assert.Equal(t, 5, <-waiting, "four counts and mark@2")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Zero(t, committedRecords(), "no commit before the changelog acknowledged")
		assert.Empty(t, persisted(), "no state persisted before the changelog acknowledged")

		cl.BeforeAppend(nil)
		close(release)
		tt.WaitIdle()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Len(t, persisted(), 6)
		assert.Equal(t, int64(6), committedRecords())
		cs := tt.Commits(0)
		state, ok := commit.DecodeState(cs[len(cs)-1].Metadata, cs[len(cs)-1].Offset, []string{"count", "mark"})
		require.True(t, ok)
		assert.Equal(t, int64(len(cl.Records(0))), state.Changelog)
		require.NoError(t, tt.Stop())
	})
}

// distinct returns the outputs once each, failing the test when two copies
// of one output (same stage and offset: the text before sep) differ.
func distinct(t *testing.T, outs []string) []string {
	t.Helper()
	return distinctBy(t, outs, " ")
}

func distinctBy(t *testing.T, outs []string, sep string) []string {
	t.Helper()
	seen := map[string]string{}
	var out []string
	for _, o := range outs {
		id, _, _ := strings.Cut(o, sep)
		if prev, ok := seen[id]; ok {
			require.Equal(t, prev, o, "a repeated output differs from its first copy")
			continue
		}
		seen[id] = o
		out = append(out, o)
	}
	return out
}

// Changelog records appended by an instance that stopped before its Kafka
// commit lie after the committed offset. The next owner restores up to the
// committed offset only, and cancels them, so that they never become part
// of a later commit's state: a third instance restoring from the changelog
// after the second one committed must answer like the model.
func TestUncommittedChangelogRecordsAreCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 30)...)
		require.NoError(t, tt.Stop())

		// A crashed instance's last checkpoint: appended, never committed.
		p, err := cl.Partition(chaintest.Topic, 0)
		require.NoError(t, err)
		junk := []chain.ChangelogRecord{
			{Key: []byte("n/u1"), Value: nil},                               // a tombstone
			{Key: []byte("n/u2"), Value: junkValue(t, tt, "999")},           // a wrong count
			{Key: []byte("m/u9"), Value: junkValue(t, tt, "77(prev none)")}, // a key the state lacks
		}
		end, err := p.Append(context.Background(), junk)
		require.NoError(t, err)

		tt.StartOn("b", 0) // restores, cancels, commits, processes nothing
		tt.WaitIdle()
		r := restoreOf(t, tt)
		assert.Equal(t, int64(3), r.Appended, "one cancelling record per key")
		require.NoError(t, tt.Move("c", 0))
		tt.Feed(0, tallyRecords(30, 30)...)
		r = restoreOf(t, tt)
		assert.Greater(t, r.To, end, "c read past the cancelled records")
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt))
		entries, err := tt.Instance("c").Entries(chaintest.Topic, 0)
		require.NoError(t, err)
		assert.NotContains(t, entries, "m/u9")
	})
}

// junkValue is a changelog value in the store's encoding for v, taken from
// a store that wrote it.
func junkValue(t *testing.T, tt *chaintest.Tester, v string) []byte {
	t.Helper()
	m := tt.Instance("scratch")
	ps, err := m.OpenPartition("scratch", 0, []string{"s"})
	require.NoError(t, err)
	defer ps.Close()
	require.NoError(t, ps.Stage(0).Set(0, []byte("k"), []byte(v), time.Time{}))
	pc, err := ps.(chain.ChangelogStore).PrepareCheckpoint([]commit.Checkpoint{{Stage: "s", Next: 1}}, time.Time{})
	require.NoError(t, err)
	defer pc.Abort()
	return append([]byte(nil), pc.Records()[0].Value...)
}

// A failed Kafka commit after the local checkpoint leaves the local state
// ahead of the group's. Restarted where nobody wrote since, the instance
// keeps it (no output repeated); when another instance has written to the
// changelog since, the local state is not a prefix of the committed
// history and is rebuilt. Outputs repeat only byte-identically.
func TestLocalStateAheadOfTheCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Hour)) // commits only at the stop
		tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 20)...)
		require.NoError(t, tt.Stop())
		tt.Start(0)
		tt.Feed(0, tallyRecords(20, 20)...)
		tt.FailCommits(1)
		require.ErrorIs(t, tt.Stop(), chain.ErrFinalCommit)

		tt.Start(0)
		tt.Feed(0, tallyRecords(40, 10)...)
		assert.Equal(t, "local state is ahead of the group's commit and the changelog ends with it (stopped after persisting, before committing)",
			restoreOf(t, tt).Reason)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt), "kept: nothing repeated")

		// a's checkpoint persists, its commit fails; b takes over from the
		// commit, writes to the changelog, and its commit fails too.
		tt.Start(0)
		tt.Feed(0, tallyRecords(50, 20)...)
		tt.FailCommits(1)
		require.ErrorIs(t, tt.Stop(), chain.ErrFinalCommit)
		tt.StartOn("b", 0)
		tt.Feed(0, tallyRecords(70, 20)...)
		tt.FailCommits(1)
		require.ErrorIs(t, tt.Stop(), chain.ErrFinalCommit)
		tt.StartOn("a", 0)
		tt.Feed(0, tallyRecords(90, 10)...)
		// b's run committed once (the idle release at the end of its feed
		// waits for a commit that records it), after a's records: its
		// changelog offset covers the records that cancel a's
		// uncommitted ones, so a's local state is a prefix of the
		// committed history (the rebuild: TestStateFollowsPartitionMoves).
		assert.Equal(t, "local state is a prefix of the committed one: catching up", restoreOf(t, tt).Reason)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), distinct(t, sortedOutputs(tt)))
	})
}

// An offset reset by a tool (empty metadata) restarts every stage there
// with empty state, and the changelog is made to say so: an instance
// restoring from it afterwards has no state from before the reset.
func TestOffsetResetStartsWithEmptyState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 30)...)
		require.NoError(t, tt.Stop())
		before := len(tt.Outputs("output"))

		tt.ResetOffset(0, 15)
		tt.Start(0)
		synctest.Wait()
		tt.WaitIdle()
		assert.Contains(t, restoreOf(t, tt).Reason, "reset by a tool")
		require.NoError(t, tt.Move("b", 0))
		tt.Feed(0, tallyRecords(30, 15)...)
		require.NoError(t, tt.Stop())

		recs := tt.Log(0).Records()
		var after []string
		for _, m := range tt.Outputs("output")[before:] {
			after = append(after, string(m.Value))
		}
		want := tallyModel(recs[15:])
		slices.Sort(want)
		slices.Sort(after)
		require.Equal(t, want, after, "from the reset on, as if the log began there")
	})
}

// A changelog append that fails stops the partition with the error; what
// it left in the changelog is cancelled by the next owner.
func TestChangelogAppendFailureStopsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Second))
		cl := tt.UseChangelog()
		tt.Start(0)
		tt.Append(0, tallyRecords(0, 20)...)
		synctest.Wait()
		cl.FailAppends(2) // the checkpoint's and the final one's
		time.Sleep(2 * time.Second)
		synctest.Wait()
		err := tt.Stop()
		require.ErrorContains(t, err, "injected changelog append failure")
		var pe *chain.PartitionError
		require.ErrorAs(t, err, &pe)

		tt.StartOn("b", 0)
		tt.WaitIdle()
		assert.Positive(t, restoreOf(t, tt).Appended, "the half-written records are cancelled")
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), distinct(t, sortedOutputs(tt)))
	})
}

// A local state older than half the changelog's tombstone retention is not
// caught up (deletions it missed may have been compacted away) but rebuilt.
func TestOldLocalStateIsRebuiltNotCaughtUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		cl.SetTombstoneRetention(24 * time.Hour)
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 20)...)
		require.NoError(t, tt.Move("b", 0))
		tt.Feed(0, tallyRecords(20, 20)...)
		require.NoError(t, tt.Move("a", 0))
		synctest.Wait()
		assert.Equal(t, "local state is a prefix of the committed one: catching up", restoreOf(t, tt).Reason, "a day's retention, written moments ago")
		require.NoError(t, tt.Move("b", 0))
		tt.Feed(0, tallyRecords(40, 20)...)
		time.Sleep(13 * time.Hour) // b's state of a stays where it was for half a day and more
		require.NoError(t, tt.Move("a", 0))
		synctest.Wait()
		r := restoreOf(t, tt)
		assert.Contains(t, r.Reason, "older than half the changelog's tombstone retention")
		assert.Equal(t, int64(0), r.From, "rebuilt from the start")
		tt.Feed(0, tallyRecords(60, 20)...)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt))
	})
}

// A final checkpoint whose changelog append fails (brokers down at the
// stop) is a failed final commit, as in exactly-once mode: Stop reports
// ErrFinalCommit with the cause, and the next owner resumes from the last
// commit and repeats what completed since, nothing lost.
func TestFailedFinalChangelogAppendIsAFailedFinalCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Hour)) // the final checkpoint is the only one
		cl := tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 20)...)
		require.NoError(t, tt.Stop())
		tt.Start(0)
		tt.Feed(0, tallyRecords(20, 20)...)
		cl.FailAppends(1)
		err := tt.Stop()
		require.ErrorIs(t, err, chain.ErrFinalCommit)
		require.ErrorContains(t, err, "injected changelog append failure", "the cause is joined")

		tt.StartOn("b", 0)
		tt.Feed(0, tallyRecords(40, 10)...)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), distinct(t, sortedOutputs(tt)))
	})
}
