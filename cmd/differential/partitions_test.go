package main

import (
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/kafka"
)

// Partitions added to the input while run runs are consumed within about
// twice --metadata-refresh (sarama's own default, 10 minutes, made a user
// wait up to 20): a run with a 1s refresh works through the input, the
// input grows from 2 to 4 partitions, more records land in all four, and
// the group must commit every partition's end — the new ones included,
// their state in changelog partitions that run added — with the outputs
// the reference model's, each once. In both modes: exactly-once appends to
// the new changelog partitions through its transactional producer.
func TestPartitionsAddedWhileRunningAreConsumed(t *testing.T) {
	for _, guarantee := range []string{guaranteeAtLeastOnce, guaranteeExactlyOnce} {
		t.Run(guarantee, func(t *testing.T) { testPartitionsAdded(t, guarantee) })
	}
}

func testPartitionsAdded(t *testing.T, guarantee string) {
	tp := newTopics(t, 2)
	tp.produce(t, 2000, 7)
	_, ends := tp.input(t)
	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: w.member().options()}, tp.runArgs("--metadata-refresh", "1s", "--guarantee", guarantee)...)
	waitReached(t, p, w.reach(ends), "the first 2 partitions' ends")

	admin, err := sarama.NewClusterAdmin(tp.b.Addrs(), tp.b.Config())
	require.NoError(t, err)
	require.NoError(t, admin.CreatePartitions(tp.in, 4, nil, false))
	require.NoError(t, admin.Close())
	awaitGrown(t, tp, 4)
	tp.partitions = 4
	tp.produce(t, 4000, 8)
	_, ends = tp.input(t)
	require.Len(t, ends, 4, "the new partitions have records")
	waitReached(t, p, w.reach(ends), "every partition's end, the added ones included")
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
	tp.verifyOutputs(t)

	admin, err = sarama.NewClusterAdmin(tp.b.Addrs(), tp.b.Config())
	require.NoError(t, err)
	defer admin.Close()
	md, err := admin.DescribeTopics([]string{kafka.ChangelogTopic(tp.group, tp.in)})
	require.NoError(t, err)
	require.Len(t, md, 1)
	require.Len(t, md[0].Partitions, 4, "the changelog grew with the input")
	require.Contains(t, p.err.String(), "added partitions to the changelog topic, as the input grew")
}

// awaitGrown waits until the brokers list partitions partitions of the
// input, each with a leader: a real broker lists the partitions
// CreatePartitions added a moment after it returns, and records produced
// before that land only in the old ones (CI once saw the test's second
// batch all in partitions 0 and 1).
func awaitGrown(t *testing.T, tp *topics, partitions int32) {
	t.Helper()
	require.NoError(t, kadmin.AwaitLeaders(tp.b.Addrs(), tp.b.Config(), tp.in, partitions, waitTimeout))
}

// waitReached waits for reached, failing if run exits first or if it does
// not come within twice waitTimeout (the condition is the wait; the
// deadline only bounds a broken run).
func waitReached(t *testing.T, p *proc, reached <-chan struct{}, what string) {
	t.Helper()
	deadline := time.NewTimer(2 * waitTimeout)
	defer deadline.Stop()
	select {
	case <-reached:
	case <-p.done:
		t.Fatalf("run exited with %d before %s; stderr:\n%s", p.code, what, tail(p.err.String()))
	case <-deadline.C:
		t.Fatalf("no commit of %s within %v; stderr:\n%s", what, 2*waitTimeout, tail(p.err.String()))
	}
}

// TestAddedPartitionLatencyWithDefaults measures how long after
// CreatePartitions a run with the default --metadata-refresh commits the
// records of the added partitions (up to about twice the refresh, so 2
// minutes). Only with DIFFERENTIAL_MEASURE_REFRESH=1: it takes that long.
func TestAddedPartitionLatencyWithDefaults(t *testing.T) {
	if os.Getenv("DIFFERENTIAL_MEASURE_REFRESH") == "" {
		t.Skip("set DIFFERENTIAL_MEASURE_REFRESH=1 to measure (takes up to 2 minutes)")
	}
	tp := newTopics(t, 2)
	tp.produce(t, 500, 7)
	_, ends := tp.input(t)
	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: w.member().options()}, tp.runArgs()...)
	waitReached(t, p, w.reach(ends), "the first 2 partitions' ends")
	admin, err := sarama.NewClusterAdmin(tp.b.Addrs(), tp.b.Config())
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, admin.CreatePartitions(tp.in, 4, nil, false))
	require.NoError(t, admin.Close())
	awaitGrown(t, tp, 4)
	tp.partitions = 4
	tp.produce(t, 1000, 8)
	_, ends = tp.input(t)
	select {
	case <-w.reach(ends):
	case <-p.done:
		t.Fatalf("run exited with %d; stderr:\n%s", p.code, tail(p.err.String()))
	case <-time.After(2*kafka.DefaultMetadataRefresh + waitTimeout):
		t.Fatalf("the added partitions were not consumed within %v", 2*kafka.DefaultMetadataRefresh+waitTimeout)
	}
	t.Logf("the added partitions' records committed %v after CreatePartitions", time.Since(start).Round(100*time.Millisecond))
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
}
