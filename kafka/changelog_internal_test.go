package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
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

// A broker that has not learnt of the changelog topic yet answers the
// check's DescribeConfigs with UNKNOWN_TOPIC_OR_PARTITION while the cluster's
// metadata (and the client's) already has it: on a 3-node Kafka, right after
// NewChangelog created the topic, the chaos suite's engine exited so at
// start ("describe changelog topic …: Request was for a topic or partition
// that does not exist on this broker"). The check asks again; here the
// embedded broker answers the first two DescribeConfigs that way.
func TestChangelogCheckWaitsForABrokerThatHasNotLearntTheTopic(t *testing.T) {
	c, err := embedded.Start(embedded.Topic("in", 2))
	require.NoError(t, err)
	defer c.Close()
	refused := testutil.Refuse(c.Fake(), kmsg.DescribeConfigs, 2, func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	})
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	cl, err := NewChangelog(context.Background(), ChangelogConfig{Brokers: c.Addrs(), InputTopic: "in", Group: "g", Sarama: sc})
	require.NoError(t, err)
	defer func() { require.NoError(t, cl.Close()) }()
	require.Equal(t, 2, refused(), "the first two checks were refused")
	require.Equal(t, int32(2), cl.Partitions())
}

// Two instances that both see the input grown both ask to grow the
// changelog: the second request is refused by Kafka ("Topic already has 3
// partitions", INVALID_PARTITIONS), which is no error. (The embedded
// broker accepts it instead; the refusal is checked on a real one.)
func TestChangelogGrownTwiceIsNoError(t *testing.T) {
	b := testbroker.New(t)
	input := b.Topic(t, 2)
	var logs syncBuilder
	cl, err := NewChangelog(context.Background(), ChangelogConfig{Brokers: b.Addrs(), InputTopic: input, Group: testbroker.Name(t, "g"),
		Sarama: b.Config(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer func() { require.NoError(t, cl.Close()) }()
	if b.Real() {
		defer func() {
			if admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config()); err == nil {
				_ = admin.DeleteTopic(cl.Topic())
				_ = admin.Close()
			}
		}()
	}
	require.NoError(t, cl.addPartitions(context.Background(), 2, 3))
	require.NotContains(t, logs.String(), "grown already")
	require.NoError(t, cl.addPartitions(context.Background(), 2, 3), "grown already")
	if b.Real() {
		require.Contains(t, logs.String(), "the changelog topic was grown already")
	}
	ps, err := cl.read.Partitions(cl.topic)
	require.NoError(t, err)
	require.Len(t, ps, 3)
}

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
