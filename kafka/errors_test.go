package kafka

import (
	"errors"
	"fmt"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

func TestIsFenced(t *testing.T) {
	msg := &sarama.ProducerMessage{Topic: "t"}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"producer fenced", sarama.ErrProducerFenced, true},
		{"producer fenced by code 90", sarama.KError(90), true},
		{"invalid producer epoch", sarama.ErrInvalidProducerEpoch, true},
		{"invalid producer id mapping", sarama.ErrInvalidProducerIDMapping, true},
		{"transaction coordinator fenced", sarama.ErrTransactionCoordinatorFenced, true},
		{"wrapped with %w", fmt.Errorf("commit: %w", sarama.ErrProducerFenced), true},
		{"joined after another kafka error", errors.Join(sarama.ErrOutOfBrokers, sarama.ErrInvalidProducerEpoch), true},
		{"sarama.Wrap", sarama.Wrap(sarama.ErrTxnOffsetCommit, sarama.ErrProducerFenced), true},
		{"producer error", &sarama.ProducerError{Msg: msg, Err: sarama.ErrProducerFenced}, true},
		{"producer errors, one fenced", sarama.ProducerErrors{
			{Msg: msg, Err: sarama.ErrNotLeaderForPartition},
			{Msg: msg, Err: sarama.ErrInvalidProducerEpoch},
		}, true},
		{"wrapped producer errors", fmt.Errorf("close: %w", sarama.ProducerErrors{{Msg: msg, Err: sarama.ErrProducerFenced}}), true},
		{"producer errors, none fenced", sarama.ProducerErrors{{Msg: msg, Err: sarama.ErrNotLeaderForPartition}}, false},
		{"invalid txn state (zombie's transaction aborted)", sarama.ErrInvalidTxnState, true},
		{"concurrent transactions is retriable", sarama.ErrConcurrentTransactions, false},
		{"fenced leader epoch is about replicas", sarama.ErrFencedLeaderEpoch, false},
		{"fenced instance id is about group members", sarama.ErrFencedInstancedId, false},
		{"plain error", errors.New("producer fenced"), false},
		{"no error code", sarama.ErrNoError, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := IsFenced(c.err); got != c.want {
				t.Fatalf("IsFenced(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// TestErrorTable: the one table answers the session, commit and producer
// questions as the two lists it replaced did.
func TestErrorTable(t *testing.T) {
	for _, c := range []struct {
		err                  error
		transient, retriable bool
	}{
		{sarama.ErrNotCoordinatorForConsumer, true, true},
		{sarama.ErrOffsetsLoadInProgress, true, true},
		{sarama.ErrUnstableOffsetCommit, true, true},
		{fmt.Errorf("commit: %w", sarama.ErrRequestTimedOut), true, true},
		{sarama.ErrRebalanceInProgress, true, false},
		{sarama.ErrIllegalGeneration, true, false},
		{sarama.ErrUnknownMemberId, true, false},
		{sarama.ErrNotLeaderForPartition, true, false},
		{sarama.ErrNotEnoughReplicas, true, false},
		{sarama.ErrFencedInstancedId, false, false},
		{sarama.ErrTopicAuthorizationFailed, false, false},
		{sarama.ErrProducerFenced, false, false},
		{sarama.ConfigurationError("bad"), false, true},
		{sarama.ErrOutOfBrokers, true, true},
		{sarama.ErrClosedClient, true, false},
		{errors.New("connection reset"), true, true},
	} {
		require.Equal(t, c.transient, transient(c.err), "transient(%v)", c.err)
		require.Equal(t, c.retriable, retriable(c.err), "retriable(%v)", c.err)
	}
	require.True(t, tooLarge(sarama.ErrMessageSizeTooLarge))
	require.True(t, tooLarge(fmt.Errorf("x: %w", sarama.ErrMessageSetSizeTooLarge)))
	require.True(t, tooLarge(sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes: 2 > 1")))
	require.False(t, tooLarge(sarama.ConfigurationError("other")))
	require.False(t, tooLarge(sarama.ErrNotLeaderForPartition))
}
