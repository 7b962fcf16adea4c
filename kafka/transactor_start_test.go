package kafka

import (
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
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
