package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/testutil"
)

// A process restarted while the node holding its transaction coordinator is
// down must not exit: the chaos suite's exactly-once broker-and-engine kill
// failed so ("transactional producer …: dial tcp …: connection refused").
// retryStart retries unreachable brokers and a moving coordinator, and
// not what the brokers refuse for good.
func TestTransactorStartRetriesUnreachableCoordinator(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	calls := 0
	err := retryStart(log, time.Minute, 0, func() error {
		calls++
		switch calls {
		case 1:
			return refused
		case 2:
			return sarama.ErrConsumerCoordinatorNotAvailable
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls, "an unreachable node, a coordinator not available yet, then an answer")

	for _, final := range []error{sarama.ErrTransactionalIDAuthorizationFailed, sarama.ErrInvalidTransactionTimeout} {
		calls = 0
		err = retryStart(log, time.Minute, 0, func() error { calls++; return final })
		require.ErrorIs(t, err, final)
		require.Equal(t, 1, calls, "%v is final", final)
	}

	calls = 0
	err = retryStart(log, 0, 0, func() error { calls++; return refused })
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, calls, "past the bound: the error")
}

// A cluster that refuses this process its transactions fails the start at
// once, with ErrNoTransactions and the fix: here an ACL refusing the
// transactional id (InitProducerId answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
// and brokers too old for it (UNSUPPORTED_VERSION), on the embedded broker.
func TestTransactorStartExplainsAClusterWithoutTransactions(t *testing.T) {
	for _, tc := range []struct {
		code int16
		want string
	}{
		{kerr.TransactionalIDAuthorizationFailed.Code, "an ACL refuses the transactional id: allow Write and Describe on it"},
		{kerr.UnsupportedVersion.Code, "the brokers are too old: exactly-once needs Kafka 2.5 or later"},
	} {
		c, err := embedded.Start(embedded.Topic("in", 1))
		require.NoError(t, err)
		testutil.Refuse(c.Fake(), kmsg.InitProducerID, -1, func(kr kmsg.Request) kmsg.Response {
			req := kr.(*kmsg.InitProducerIDRequest)
			if req.TransactionalID == nil {
				return nil
			}
			resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode = tc.code
			return resp
		})
		start := time.Now()
		_, err = NewTransactor(TransactorConfig{Brokers: c.Addrs(), TransactionalID: "g.refused"})
		c.Close()
		require.ErrorIs(t, err, ErrNoTransactions)
		require.ErrorContains(t, err, `kafka: transactional producer "g.refused": the cluster cannot run transactions: `)
		require.ErrorContains(t, err, tc.want)
		require.Less(t, time.Since(start), 30*time.Second, "refused for good: not retried for startAttempts")
	}
}

// Every refusal that means the cluster cannot run transactions is explained
// as such; the coordinator's absence is the transaction state topic's.
func TestExplainTxn(t *testing.T) {
	for err, want := range map[error]string{
		sarama.ErrConsumerCoordinatorNotAvailable:    "transaction.state.log.replication.factor and transaction.state.log.min.isr",
		sarama.ErrNotEnoughReplicas:                  "transaction.state.log.replication.factor",
		sarama.ErrTransactionalIDAuthorizationFailed: "--operation Write --operation Describe --transactional-id",
		sarama.ErrClusterAuthorizationFailed:         "--operation IdempotentWrite --cluster",
		sarama.ErrUnsupportedVersion:                 "Kafka 2.5 or later",
	} {
		got := explainTxn(fmt.Errorf("init: %w", err))
		require.ErrorIs(t, got, ErrNoTransactions, "%v", err)
		require.ErrorIs(t, got, err)
		require.ErrorContains(t, got, want)
	}
	got := explainTxn(sarama.ErrInvalidTransactionTimeout)
	require.NotErrorIs(t, got, ErrNoTransactions, "a timeout above the brokers' maximum is this process's configuration")
	require.ErrorContains(t, got, "transaction.max.timeout.ms")
}

// The transactional producer retries soon (AddPartitionsToTxn's
// CONCURRENT_TRANSACTIONS after an EndTxn lasts a few ms), then backs off
// to sarama's 100 ms; a base configuration's own backoff is kept.
func TestTransactorRetryBackoff(t *testing.T) {
	c := TransactorConfig{Brokers: []string{"b:1"}, TransactionalID: "g.i"}
	sc, err := c.saramaConfig()
	require.NoError(t, err)
	f := sc.Producer.Transaction.Retry.BackoffFunc
	require.NotNil(t, f)
	require.Equal(t, 5*time.Millisecond, f(0, 50))
	require.Equal(t, 10*time.Millisecond, f(1, 50))
	require.Equal(t, 100*time.Millisecond, f(5, 50))
	require.Equal(t, 100*time.Millisecond, f(49, 50))
	var total time.Duration
	for r := range 50 {
		total += f(r, 50)
	}
	require.Greater(t, total, 4*time.Second, "the retries still span seconds (a coordinator moving)")

	base := sarama.NewConfig()
	own := func(int, int) time.Duration { return time.Second }
	base.Producer.Transaction.Retry.BackoffFunc = own
	c.Sarama = base
	sc, err = c.saramaConfig()
	require.NoError(t, err)
	require.Equal(t, time.Second, sc.Producer.Transaction.Retry.BackoffFunc(0, 50))
}
