package cluster_test

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/cluster"
	"github.com/differential-dev/differential/internal/testbroker"
)

// TestTopicLifecycle: a created topic is ready for produce and read back;
// deleting it twice is not an error.
func TestTopicLifecycle(t *testing.T) {
	c := testbroker.New(t).Cluster()
	name := cluster.Name("lifecycle", "t")
	require.NoError(t, c.CreateTopic(name, 2))
	var msgs []*sarama.ProducerMessage
	for _, v := range []string{"a", "b", "c"} {
		msgs = append(msgs, &sarama.ProducerMessage{Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(v)})
	}
	require.Equal(t, cluster.Version, c.Config().Version)
	require.NoError(t, c.Produce(name, msgs...))
	got, err := c.ReadAll(name, false)
	require.NoError(t, err)
	p := msgs[0].Partition
	require.Len(t, got[p], 3, "one key, one partition")
	for i, v := range []string{"a", "b", "c"} {
		require.Equal(t, v, string(got[p][i].Value))
		require.Equal(t, int64(i), msgs[i].Offset, "Produce reports where each landed")
	}

	require.NoError(t, c.DeleteTopics(name))
	require.NoError(t, c.DeleteTopics(name), "an unknown topic is already deleted")
}

func TestNamesAreUnique(t *testing.T) {
	a, b := cluster.Name("x", ""), cluster.Name("x", "s")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "x-"))
	require.True(t, strings.HasSuffix(b, "-s"))
}

func TestOpenTunesEveryConfig(t *testing.T) {
	c, err := cluster.Open([]string{"127.0.0.1:1"}, func(cfg *sarama.Config) { cfg.ClientID = "tuned" })
	require.NoError(t, err, "a real cluster is not dialled by Open")
	require.True(t, c.Real())
	require.Nil(t, c.Embedded())
	require.Equal(t, "tuned", c.Config().ClientID)
	require.NoError(t, c.Close())
}
