package chain_test

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
)

// standbySource is a claim that ends at once (eof) or when its context
// does.
type standbySource struct{ eof bool }

func (s standbySource) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	if s.eof {
		return dst, io.EOF
	}
	<-ctx.Done()
	return dst, ctx.Err()
}
func (standbySource) HighWatermark() int64 { return -1 }
func (standbySource) Poll(context.Context, int64) (chain.Poller, error) {
	return nil, io.EOF
}

// A standby on instance b follows the partition that a runs, up to the
// group's committed changelog offset and never past it; when the
// partition moves to b, its restore reads only what was committed since
// the standby's last catch-up, and the outputs are the model's.
func TestStandbyKeepsTheStateWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		var all []chain.Record
		feed := func(n int) {
			recs := tallyRecords(len(all), n)
			all = append(all, recs...)
			tt.Feed(0, recs...)
			tt.WaitCommitted(0, int64(len(all)))
		}
		tt.Start(0)
		feed(40)
		last := func() (chaintest.Commit, int64) {
			cs := tt.Commits(0)
			require.NotEmpty(t, cs)
			c := cs[len(cs)-1]
			st, ok := commit.DecodeState(c.Metadata, c.Offset, []string{"count", "mark"})
			require.True(t, ok)
			return c, st.Changelog
		}

		b, err := chain.New(tally(), testDecoder, chain.WithStore(tt.Instance("b")), chain.WithChangelog(cl))
		require.NoError(t, err)
		sb, err := b.OpenStandby(chaintest.Topic, 0)
		require.NoError(t, err)
		_, err = b.OpenStandby(chaintest.Topic, 0)
		require.Error(t, err, "one standby per partition")

		c, off := last()
		st, err := sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.NoError(t, err)
		assert.Equal(t, off, st.Committed)
		assert.True(t, st.Rebuilt, "b had no local state")
		assert.Equal(t, int64(0), st.From)
		assert.Positive(t, st.Records)

		st, err = sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.NoError(t, err)
		assert.Zero(t, st.Records, "nothing committed since")

		feed(40)
		c, off2 := last()
		require.Greater(t, off2, off)
		// Records a appended past its last commit are not applied: they
		// may be cancelled by the next owner.
		st, err = sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.NoError(t, err)
		assert.False(t, st.Rebuilt)
		assert.Equal(t, off, st.From)
		assert.Equal(t, off2, st.Committed)
		assert.LessOrEqual(t, st.Records, off2-off)
		require.NoError(t, sb.Close())
		_, err = sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.ErrorIs(t, err, chain.ErrStandbyClosed)

		feed(10)
		_, off3 := last()
		require.NoError(t, tt.Move("b", 0))
		synctest.Wait()
		r := restoreOf(t, tt)
		assert.Equal(t, "local state is a prefix of the committed one: catching up", r.Reason)
		assert.Equal(t, off2, r.From, "the restore starts where the standby stopped")
		assert.LessOrEqual(t, r.Records, off3-off2)
		feed(20)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), sortedOutputs(tt), "every output once, as the model says")
	})
}

// A partition that starts running takes its standby over: RunPartition
// closes it (a CatchUp after that says so) and opens the state itself;
// while it runs, no standby of it opens.
func TestRunPartitionTakesTheStandbyOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond))
		cl := tt.UseChangelog()
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 30)...)
		require.NoError(t, tt.Stop())
		cs := tt.Commits(0)
		c := cs[len(cs)-1]

		b, err := chain.New(tally(), testDecoder, chain.WithStore(tt.Instance("b")), chain.WithChangelog(cl),
			chain.WithIdleTimeout(time.Millisecond))
		require.NoError(t, err)
		sb, err := b.OpenStandby(chaintest.Topic, 0)
		require.NoError(t, err)
		_, err = sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.NoError(t, err)
		assert.False(t, b.Starting(), "nothing claimed")

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- b.RunPartition(ctx, chain.Assignment{Topic: chaintest.Topic, Partition: 0, Committed: c.Offset,
				Metadata: c.Metadata, Source: standbySource{}, Committer: nopCommitter{}})
		}()
		synctest.Wait()
		assert.False(t, b.Starting(), "the partition's stages run")
		_, err = sb.CatchUp(t.Context(), c.Offset, c.Metadata)
		require.ErrorIs(t, err, chain.ErrStandbyClosed, "the running partition closed it")
		_, err = b.OpenStandby(chaintest.Topic, 0)
		require.ErrorIs(t, err, chain.ErrPartitionRunning)
		st := b.Stats()
		require.Len(t, st, 1)
		assert.Equal(t, "local state is a prefix of the committed one: catching up", st[0].Restore.Reason)
		assert.Zero(t, st[0].Restore.Records, "the standby was at the commit")
		cancel()
		require.NoError(t, <-done)

		sb, err = b.OpenStandby(chaintest.Topic, 0)
		require.NoError(t, err, "a standby opens again once the partition stopped")
		require.NoError(t, sb.Close())
	})
}
