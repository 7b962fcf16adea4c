package kafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// A stop whose final changelog append fails (brokers down at SIGTERM) is a
// clean stop of Run, as in exactly-once mode: the partition reports
// chain.ErrFinalCommit, Run returns nil (the CLI exits 0), and the restart
// resumes from the previous commit. Here the changelog is the in-memory one
// with its next append failing; the final checkpoint is the only one.
func TestFailedFinalChangelogAppendIsACleanStop(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	produceWorkload(t, b, topic, 1, 50, 1)

	var processed atomic.Int64
	all := make(chan struct{})
	keep := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		if processed.Add(1) == 50 {
			close(all)
		}
		return pc.State().Set(e.Key, e.Value, time.Time{})
	})
	cl := chaintest.NewChangelog()
	ch, err := chain.New([]chain.Stage{{Name: "keep", Processor: keep}}, decoder,
		chain.WithStore(store.NewMemory()), chain.WithChangelog(cl), chain.WithLogger(testLogger(t)),
		chain.WithCommitInterval(time.Hour), chain.WithShutdownTimeout(5*time.Second))
	require.NoError(t, err)
	released := make(chan error, 1)
	cfg := groupConfig(b, topic, group, t)
	cfg.Hooks.Released = func(_ string, _ int32, err error) { released <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kafka.Run(ctx, ch, cfg) }()
	recv(t, all, "every record processed")
	cl.FailAppends(1)
	cancel()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	require.NoError(t, runErr, "a failed final checkpoint is a clean stop")
	err = <-released
	require.ErrorIs(t, err, chain.ErrFinalCommit)
	require.ErrorContains(t, err, "injected changelog append failure")
	require.False(t, errors.Is(err, chain.ErrShutdownTimeout))
	require.Empty(t, groupOffsets(t, b, group, topic, []int32{0})[0].Metadata, "nothing was committed")
}
