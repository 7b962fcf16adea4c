package kadmin_test

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/testbroker"
)

// TestClusterQuestions: Leader names a broker of the cluster that the
// partition's metadata names too, Coordinator names a broker, Serving
// accepts a broker's own id and refuses another, and a healthy cluster has
// no under-replicated partition. Runs on the embedded broker, or the real
// one DIFFERENTIAL_TEST_BROKERS names.
func TestClusterQuestions(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 2)
	cfg := kadmin.ProbeConfig()

	client, err := sarama.NewClient(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	ids := map[int32]string{}
	for _, br := range client.Brokers() {
		ids[br.ID()] = br.Addr()
	}

	for p := range int32(2) {
		id, err := kadmin.Leader(b.Addrs(), cfg, topic, p)
		require.NoError(t, err)
		want, err := client.Leader(topic, p)
		require.NoError(t, err)
		assert.Equal(t, want.ID(), id)
	}
	_, err = kadmin.Leader(b.Addrs(), cfg, topic, 7)
	assert.Error(t, err, "a partition the topic does not have")

	id, err := kadmin.Coordinator(b.Addrs(), cfg, testbroker.Name(t, "group"))
	require.NoError(t, err)
	assert.Contains(t, ids, id)

	for id, addr := range ids {
		assert.NoError(t, kadmin.Serving(addr, id, cfg))
		assert.Error(t, kadmin.Serving(addr, id+100, cfg), "not its id")
	}

	under, err := kadmin.UnderReplicated(b.Addrs(), cfg)
	require.NoError(t, err)
	assert.Empty(t, under)
}
