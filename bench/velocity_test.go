package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestVelocityRun runs B (small) with the velocity measurement on the
// embedded broker: the velocity chain's outputs and alerts must equal the
// model's, and the report must give its cost per record.
func TestVelocityRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workload B on the embedded broker")
	}
	rep, err := Run(context.Background(), Options{Workloads: []string{"B"}, Records: 3000, NoLatency: true,
		Velocity: time.Hour, Dir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, rep.Workloads, 1)
	v := rep.Workloads[0].Velocity
	require.NotNil(t, v)
	require.Equal(t, "window 1h, bucket 1m, lateness 1h, threshold 20", v.Settings)
	require.NotNil(t, v.Chain)
	require.NotNil(t, v.Chain.Correctness)
	require.True(t, v.Chain.Correctness.OK, "%+v", v.Chain.Correctness)
	require.Equal(t, rep.Workloads[0].Chain.Correctness.Outputs+v.Alerts, v.Chain.Correctness.Outputs)
	require.NotNil(t, v.RatioThroughput)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "chain + velocity stage (window 1h, bucket 1m, lateness 1h, threshold 20)")
	require.Contains(t, table.String(), "µs CPU")
}

func TestVelocityOptions(t *testing.T) {
	require.ErrorContains(t, Options{Velocity: -time.Second}.withDefaults().validate(), "--velocity-window must be >= 0")
	require.ErrorContains(t, Options{Velocity: 365 * 24 * time.Hour}.withDefaults().validate(), "--velocity-window 8760h0m0s")
	require.NoError(t, Options{Velocity: time.Hour}.withDefaults().validate())
}
