package metricshttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/internal/testutil"
)

// TestLiveViewGuarded: with a token, the live view's page and JSON refuse
// a request without it (401) and answer one with it; /metrics and /healthz
// answer without it; other paths are not the page.
func TestLiveViewGuarded(t *testing.T) {
	stats := func() []chain.PartitionStats {
		return []chain.PartitionStats{{Topic: "events", Partition: 0, HighWatermark: 5,
			Stages: []chain.StageStats{{Name: "click", Position: 5, Mode: "buffered"}}}}
	}
	reg := metrics.NewRegistry()
	metrics.GetOrRegisterGauge("differential.partition.events.0.committed", reg).Update(5)
	mux := metricshttp.Mux(metricshttp.Handler(reg, metricshttp.Options{}), &metricshttp.Health{Stats: stats, StallTimeout: 1})
	metricshttp.MountLiveView(mux, liveview.New(liveview.Config{Stats: stats}), httpauth.New("tok", false))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path, token string) (int, string) {
		code, _, b := testutil.Get(t, srv.URL+path, token)
		return code, string(b)
	}
	for _, path := range []string{"/", liveview.APIPath} {
		code, body := get(path, "")
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.NotContains(t, body, "events")
		code, _ = get(path, "wrong")
		require.Equal(t, http.StatusUnauthorized, code, path)
		code, body = get(path, "tok")
		require.Equal(t, http.StatusOK, code, path)
		require.NotEmpty(t, body)
	}
	_, body := get(liveview.APIPath, "tok")
	require.Contains(t, body, `"topic":"events"`)
	code, body := get("/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "differential_partition_committed")
	code, _ = get("/healthz", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = get("/nothing-here", "tok")
	require.Equal(t, http.StatusNotFound, code)
}
