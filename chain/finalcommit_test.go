package chain_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/store"
)

// failingStore is a store.Memory whose checkpoints fail while fail is set.
type failingStore struct {
	*store.Memory
	fail *atomic.Bool
}

func (s failingStore) OpenPartition(topic string, partition int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.Memory.OpenPartition(topic, partition, stages)
	if err != nil {
		return nil, err
	}
	return failingPartition{ps, s.fail}, nil
}

type failingPartition struct {
	chain.PartitionStore
	fail *atomic.Bool
}

var errInjectedStore = errors.New("injected store write failure")

func (p failingPartition) Checkpoint(cps []commit.Checkpoint, evictBefore time.Time) error {
	if p.fail.Load() {
		return errInjectedStore
	}
	return p.PartitionStore.Checkpoint(cps, evictBefore)
}

// A final checkpoint whose store write fails (no changelog) is a failed
// final commit too: Stop reports ErrFinalCommit with the cause, and the
// restart resumes from the last commit, every output once or repeated
// identically.
func TestFailedFinalStoreWriteIsAFailedFinalCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		tt := chaintest.New(t, tally(), testDecoder, chain.WithIdleTimeout(time.Millisecond),
			chain.WithCommitInterval(time.Hour), chain.WithStore(failingStore{store.NewMemory(), &fail}))
		tt.Start(0)
		tt.Feed(0, tallyRecords(0, 20)...)
		require.NoError(t, tt.Stop())
		tt.Start(0)
		tt.Feed(0, tallyRecords(20, 20)...)
		fail.Store(true)
		err := tt.Stop()
		require.ErrorIs(t, err, chain.ErrFinalCommit)
		require.ErrorIs(t, err, errInjectedStore, "the cause is joined")

		fail.Store(false)
		tt.Start(0)
		tt.Feed(0, tallyRecords(40, 10)...)
		require.NoError(t, tt.Stop())
		require.Equal(t, sortedModel(tt.Log(0).Records()), distinct(t, sortedOutputs(tt)))
	})
}
