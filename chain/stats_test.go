package chain_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

type contactSource struct {
	eofSource
	at time.Time
}

func (s *contactSource) LeaderContact() time.Time { return s.at }

type pendingCommitter struct {
	nopCommitter
	since time.Time
}

func (c pendingCommitter) CommitPendingSince() time.Time { return c.since }

// Stats reports what a Source and a Committer say about their contact with
// the cluster (chain.LeaderContact, chain.CommitPending), and the zero time
// for ones that do not say: the health check's leader and commit rules
// read these fields.
func TestStatsReportLeaderContactAndPendingCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		contact := time.Now().Add(-7 * time.Second)
		pending := time.Now().Add(-3 * time.Second)
		recs := []chain.Record{{Topic: "t", Offset: 0, Value: []byte(ev("click", 0))}}
		ch, err := chain.New([]chain.Stage{{Name: "a", Processor: noop}}, testDecoder)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		go func() {
			done <- ch.RunPartition(ctx, chain.Assignment{Topic: "t", Partition: 0, Committed: 0,
				Source: &contactSource{eofSource: eofSource{recs: recs}, at: contact}, Committer: pendingCommitter{since: pending}})
		}()
		go func() {
			done <- ch.RunPartition(ctx, chain.Assignment{Topic: "t", Partition: 1, Committed: 0,
				Source: &eofSource{recs: recs}, Committer: nopCommitter{}})
		}()
		synctest.Wait()
		stats := ch.Stats()
		require.Len(t, stats, 2)
		for _, ps := range stats {
			if ps.Partition == 0 {
				require.True(t, ps.LeaderContact.Equal(contact), "LeaderContact %v, want %v", ps.LeaderContact, contact)
				require.True(t, ps.CommitPendingSince.Equal(pending), "CommitPendingSince %v, want %v", ps.CommitPendingSince, pending)
			} else {
				require.True(t, ps.LeaderContact.IsZero())
				require.True(t, ps.CommitPendingSince.IsZero())
			}
		}
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
}
