package main

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

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
