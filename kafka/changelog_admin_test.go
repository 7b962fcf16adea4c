package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
)

// An engine restarted while one broker of the cluster is down must not fail
// at the changelog check because the admin request went to the dead broker
// (sarama picks a random broker of its metadata): the chaos suite's
// broker-and-engine-kill scenario failed so ("describe changelog topic …:
// connect: connection refused"). withAdmin retries such errors with a new
// admin, and does not retry what the broker refused for good.
func TestChangelogAdminRetriesUnreachableBrokers(t *testing.T) {
	b := testbroker.New(t)
	c := &Changelog{readConf: b.Config(), log: slog.New(slog.DiscardHandler)}
	cfg := ChangelogConfig{Brokers: b.Addrs()}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

	calls := 0
	err := c.withAdmin(context.Background(), cfg, func(sarama.ClusterAdmin) error {
		calls++
		if calls < 3 {
			return refused
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls, "two unreachable brokers, then an answer")

	calls = 0
	err = c.withAdmin(context.Background(), cfg, func(sarama.ClusterAdmin) error {
		calls++
		return &sarama.DescribeConfigError{Err: sarama.ErrTopicAuthorizationFailed}
	})
	require.ErrorIs(t, err, sarama.ErrTopicAuthorizationFailed)
	require.Equal(t, 1, calls, "an authorization failure is final")

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = c.withAdmin(ctx, cfg, func(sarama.ClusterAdmin) error {
		calls++
		cancel()
		return refused
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, calls, "no retry once the context ended")
}
