package kafka

import (
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
)

// SetGrowMetadataWait shortens how long growTo waits for a partition the
// input does not list, for tests that ask for one on purpose; it returns
// the function that restores it.
func SetGrowMetadataWait(d time.Duration) (restore func()) {
	old := growMetadataWait
	growMetadataWait = d
	return func() { growMetadataWait = old }
}

// SetCommitFaults makes t's Commit fail: with before's error just before
// sarama's CommitTxn (the transaction is still open: nothing committed), or
// with after's once CommitTxn succeeded (the transaction committed, as when
// EndTxn's response is lost). A nil function, or one returning nil, injects
// nothing.
func SetCommitFaults(t *Transactor, before, after func() error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.faults.before, t.faults.after = before, after
}

// NewTestCommitter is the chain.Committer of topic/partition for group on
// client, as Run hands to its partitions, without a group member
// (generation -1: brokers accept it for a group with no members): for
// Transactor tests that commit offsets without a Run.
func NewTestCommitter(client sarama.Client, group, topic string, partition int32) chain.Committer {
	return &partitionCommitter{o: newOffsets(client, group), topic: topic, partition: partition}
}

// SetTransactorClock replaces the clock t's size limits are learned and
// expire by (sizeProbeAfter).
func SetTransactorClock(t *Transactor, now func() time.Time) {
	t.now = now
}

// SizeProbeAfter is how long a Transactor trusts a learned size limit.
func SizeProbeAfter() time.Duration { return sizeProbeAfter }

// InstanceIDs returns the group instance id of each of Run's clients.
func InstanceIDs(c *Config) (group, commit, poll string, err error) {
	cc, err := c.clientConfigs()
	if err != nil {
		return "", "", "", err
	}
	return cc.group.Consumer.Group.InstanceId, cc.commit.Consumer.Group.InstanceId, cc.poll.Consumer.Group.InstanceId, nil
}
