package metricshttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

func TestHealth(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var stats []chain.PartitionStats
	joined := false
	h := &Health{
		Stats:        func() []chain.PartitionStats { return stats },
		Joined:       func() bool { return joined },
		StallTimeout: time.Minute,
		Now:          func() time.Time { return now },
	}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}

	code, body := get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not ready")

	joined = true
	code, body = get()
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "no partition assigned")

	stage := func(name string, lag int64, last time.Duration) chain.StageStats {
		return chain.StageStats{Name: name, Position: 100, Lag: lag, LastProgress: now.Add(-last)}
	}
	stats = []chain.PartitionStats{
		{Topic: "events", Partition: 0, Stages: []chain.StageStats{
			stage("click", 0, time.Hour),           // no lag: idle, not stalled
			stage("install", 5, 30*time.Second),    // lagging but moving
			stage("purchase", -1, 2*time.Minute)}}, // high watermark unknown
		{Topic: "events", Partition: 1}, // not started yet: no stages
	}
	code, body = get()
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "2 partition(s) assigned")

	stats[0].Stages[2] = stage("purchase", 7, 61*time.Second)
	code, body = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "events/0 stage purchase: position 100, lag 7, no progress for 1m1s")
	require.NotContains(t, body, "install")
}

func TestHealthWithoutJoinedFunc(t *testing.T) {
	h := &Health{Stats: func() []chain.PartitionStats { return nil }, StallTimeout: time.Second}
	status, _ := h.Check()
	require.Equal(t, http.StatusServiceUnavailable, status)
	h.Stats = func() []chain.PartitionStats { return []chain.PartitionStats{{Topic: "t"}} }
	status, _ = h.Check()
	require.Equal(t, http.StatusOK, status)
}

// A partition restoring its state reports "restoring" with its progress,
// healthy: its stages have not started, and a restore is work, not a stall.
func TestHealthRestoring(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	stats := []chain.PartitionStats{
		{Topic: "events", Partition: 3, Restore: chain.RestoreStats{Restoring: true, Phase: "reading",
			From: 0, To: 1_000_000, Position: 250_000, Records: 249_000, Bytes: 9_000_000, Duration: 1500 * time.Millisecond}},
		{Topic: "events", Partition: 4, Restore: chain.RestoreStats{Phase: "done", Records: 10}},
	}
	h := &Health{Stats: func() []chain.PartitionStats { return stats }, StallTimeout: time.Minute, Now: func() time.Time { return now }}
	status, body := h.Check()
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "restoring events/3: reading, changelog offset 250000 of [0, 1000000), 249000 records (9000000 bytes) applied in 1.5s")
	require.NotContains(t, body, "events/4")
	require.NotContains(t, body, "stalled:")
}
