package workload_test

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/workload"
)

func small() workload.Config {
	cfg := workload.DefaultConfig()
	cfg.Records = 5000
	cfg.Users = 300
	cfg.MalformedFrac = 0.02
	cfg.MaxRecordBytes = 2048
	return cfg
}

func TestDeterministic(t *testing.T) {
	cfg := small()
	a, b := workload.Generate(cfg), workload.Generate(cfg)
	require.Equal(t, a, b)
	cfg.Seed++
	c := workload.Generate(cfg)
	assert.NotEqual(t, a, c)
}

func TestShape(t *testing.T) {
	cfg := small()
	recs := workload.Generate(cfg)
	require.Len(t, recs, cfg.Records)
	next := make([]int64, cfg.Partitions)
	var prev time.Time
	for i, r := range recs {
		require.Equal(t, workload.Partition(r.Key, int32(cfg.Partitions)), r.Partition, "record %d", i)
		require.Equal(t, next[r.Partition], r.Offset, "record %d", i)
		next[r.Partition]++
		require.False(t, r.Timestamp.Before(prev), "timestamps follow production order")
		prev = r.Timestamp
		require.Equal(t, r.Timestamp, r.Timestamp.Truncate(time.Millisecond))
		require.Equal(t, "events", r.Topic)
	}
	kinds := workload.CountKinds(recs)
	for _, k := range workload.MalformedKinds {
		assert.Positive(t, kinds["malformed/"+k], k)
	}
	for _, k := range []string{"click", "click/late", "install", "install/reinstall", "purchase", "purchase/orphan", "dup"} {
		assert.Positive(t, kinds[k], k)
	}
	for _, r := range recs {
		if r.Kind == "malformed/oversized" {
			assert.Equal(t, cfg.MaxRecordBytes+1, len(r.Value))
		}
	}
	parts := workload.Split(recs, cfg.Partitions)
	n := 0
	for p, rs := range parts {
		for i, r := range rs {
			require.Equal(t, int32(p), r.Partition)
			require.Equal(t, int64(i), r.Offset)
		}
		n += len(rs)
	}
	assert.Equal(t, cfg.Records, n)
	if testing.Verbose() {
		keys := make([]string, 0, len(kinds))
		for k := range kinds {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("%-40s %d", k, kinds[k])
		}
	}
}

func TestHotPartitions(t *testing.T) {
	cfg := small()
	cfg.ZipfS = 0
	cfg.HotPartitions, cfg.HotFrac = 1, 0.8
	counts := make([]int, cfg.Partitions)
	for _, r := range workload.Generate(cfg) {
		counts[r.Partition]++
	}
	assert.Greater(t, counts[0], cfg.Records/2, "counts %v", counts)
}

func TestPartitionMatchesSarama(t *testing.T) {
	for _, n := range []int32{1, 3, 8, 12, 64} {
		p := sarama.NewHashPartitioner("events")
		for i := 0; i < 5000; i++ {
			key := []byte(fmt.Sprintf("u%d", i))
			if i%7 == 0 {
				key = []byte(strings.Repeat("k", i%50) + "é")
			}
			want, err := p.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
			require.NoError(t, err)
			require.Equal(t, want, workload.Partition(key, n), "key %q n %d", key, n)
		}
	}
}

func TestCostDistribution(t *testing.T) {
	cfg := small()
	cfg.Records = 50_000
	cfg.CostMedian = time.Millisecond
	recs := workload.Generate(cfg)
	costs := make([]float64, len(recs))
	for i, r := range recs {
		costs[i] = float64(r.Cost)
	}
	sort.Float64s(costs)
	p50, p99 := costs[len(costs)/2], costs[len(costs)*99/100]
	assert.InDelta(t, float64(time.Millisecond), p50, 0.05*float64(time.Millisecond))
	assert.InDelta(t, 50, p99/p50, 8, "p99/p50")
	assert.InDelta(t, math.Log(50)/2.326, workload.CostSigma, 1e-12)
}

func TestValidateAndString(t *testing.T) {
	cfg := workload.DefaultConfig()
	require.NoError(t, cfg.Validate())
	assert.Contains(t, cfg.String(), "seed=1 records=100000 partitions=8")
	cfg.Partitions = 0
	cfg.DupFrac = 2
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Partitions must be > 0")
	assert.Contains(t, err.Error(), "DupFrac must be in [0, 1]")
}

// TestHeavyKey: HeavyKeyShare gives HeavyKey about that share of its
// partition's records, with journeys of the usual shape; without it the key
// never appears.
func TestHeavyKey(t *testing.T) {
	cfg := workload.DefaultConfig()
	cfg.Records = 100_000
	for _, share := range []float64{0, 0.3} {
		cfg.HeavyKeyShare = share
		recs := workload.Generate(cfg)
		part := workload.Partition([]byte(workload.HeavyKey), int32(cfg.Partitions))
		var inPart, heavy int
		kinds := map[string]int{}
		for _, r := range recs {
			if r.Partition != part {
				continue
			}
			inPart++
			if string(r.Key) == workload.HeavyKey {
				heavy++
				kinds[strings.SplitN(r.Kind, "/", 2)[0]]++
			}
		}
		if share == 0 {
			assert.Zero(t, heavy)
			continue
		}
		got := float64(heavy) / float64(inPart)
		assert.InDelta(t, share, got, 0.03, "heavy key's share of partition %d", part)
		for _, k := range []string{"click", "install", "purchase"} {
			assert.Greater(t, kinds[k], 500, "heavy key's %s records", k)
		}
		assert.Contains(t, cfg.String(), "heavy-key=0.3")
	}
}
