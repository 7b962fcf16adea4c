package reference

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
)

// TestIndexedMatchesEqualLiteral: Run's indexed click and install lookups
// give the same result, field by field, as looking at every click and
// install of the user, on generated inputs with hot users, late clicks,
// duplicates and reinstalls, under several rule configurations.
func TestIndexedMatchesEqualLiteral(t *testing.T) {
	short := attribution.DefaultConfig()
	short.Lookback, short.Lateness, short.InstallRetention = time.Hour, 3*time.Hour, 2*time.Hour
	idle := attribution.DefaultConfig()
	idle.IdleTimeout = time.Hour
	for i, cfg := range []attribution.Config{attribution.DefaultConfig(), short, idle} {
		wc := workload.DefaultConfig()
		wc.Seed, wc.Records, wc.Partitions, wc.Users, wc.ZipfS = uint64(i+1), 20_000, 2, 500, 1.1
		parts := make([][]chain.Record, wc.Partitions)
		for _, r := range workload.Generate(wc) {
			parts[r.Partition] = append(parts[r.Partition], r.Record)
		}
		for p, recs := range parts {
			indexed := Run(recs, cfg)
			literal = true
			want := Run(recs, cfg)
			literal = false
			require.NotEmpty(t, want.Installs)
			require.NotEmpty(t, want.Purchases)
			require.Equal(t, want, indexed, "config %d, partition %d", i, p)
		}
	}
}
