package metricshttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// TestProbes: /readyz is 503 with its reason before the join, with no
// partition, during a restore and while a partition is stalled — a broker
// outage (no answer from the partition's leader) among them, when /healthz
// is 503 too — and /livez stays 200 through all of it; /healthz keeps its
// rules (200 during a restore and with no partition).
func TestProbes(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	var stats []chain.PartitionStats
	joined := false
	h := &Health{
		Stats:        func() []chain.PartitionStats { return stats },
		Joined:       func() bool { return joined },
		StallTimeout: 5 * time.Second,
		Now:          func() time.Time { return now },
	}
	srv := httptest.NewServer(Mux(Handler(metrics.NewRegistry(), Options{}), h))
	defer srv.Close()
	probe := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		return resp.StatusCode, string(b)
	}
	expect := func(ready, health int, readyBody string) {
		t.Helper()
		code, body := probe("/readyz")
		require.Equal(t, ready, code, body)
		require.Contains(t, body, readyBody)
		code, body = probe("/healthz")
		require.Equal(t, health, code, body)
		code, body = probe("/livez")
		require.Equal(t, http.StatusOK, code, "/livez: %s", body)
	}

	expect(503, 503, "the consumer group has not been joined yet")
	joined = true
	expect(503, 200, "no partition assigned")

	healthy := func(p int32) chain.PartitionStats {
		return chain.PartitionStats{Topic: "events", Partition: p, HighWatermark: 100, LeaderContact: now.Add(-time.Second),
			Stages: []chain.StageStats{{Name: "click", Position: 100, LastProgress: now.Add(-time.Hour)}}}
	}
	stats = []chain.PartitionStats{healthy(0), {Topic: "events", Partition: 1,
		Restore: chain.RestoreStats{Restoring: true, Phase: "reading", From: 0, To: 1000, Position: 250}}}
	expect(503, 200, "restoring events/1: reading, changelog offset 250 of [0, 1000)")

	stats[1] = healthy(1)
	expect(200, 200, "ready: 2 partition(s) assigned")

	// The broker is down: no answer from either partition's leader.
	stats[0].LeaderContact = now.Add(-61 * time.Second)
	stats[1].LeaderContact = now.Add(-61 * time.Second)
	expect(503, 503, "stalled events/0: no answer from the partition's leader for 1m1s")
	_, body := probe("/readyz")
	require.Contains(t, body, "stalled events/1: no answer")

	// A stage that lags without moving, and a commit not acknowledged.
	stats[0].LeaderContact, stats[1].LeaderContact = now, now
	stats[0].Stages[0].Lag = 7
	stats[1].CommitPendingSince = now.Add(-10 * time.Second)
	expect(503, 503, "stalled events/0 stage click: position 100, lag 7, no progress for 1h0m0s")
	_, body = probe("/readyz")
	require.Contains(t, body, "stalled events/1: commit not acknowledged")

	stats[0].Stages[0].Lag, stats[1].CommitPendingSince = 0, time.Time{}
	expect(200, 200, "ready")
}

// TestLiveWedgedAndExited: /livez is 503 once a call of the engine's Stats
// has not returned for the wedge timeout (and 200, "slow", before), 200
// again once it returns, and 503 once the engine has stopped. The bubble's
// clock stands in for the wait.
func TestLiveWedgedAndExited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var block atomic.Bool
		var running atomic.Bool
		running.Store(true)
		calls := atomic.Int64{}
		h := &Health{
			Stats: func() []chain.PartitionStats {
				calls.Add(1)
				if block.Load() {
					<-release
				}
				return []chain.PartitionStats{{Topic: "events"}}
			},
			Running:      running.Load,
			WedgeTimeout: 10 * time.Second,
		}
		status, body := h.Live()
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "ok: the engine answers (1 partition(s) assigned)\n", body)

		block.Store(true)
		status, body = h.Live()
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, "slow to answer")
		time.Sleep(5 * time.Second)
		status, body = h.Live()
		require.Equal(t, http.StatusOK, status, "5.5 s is below the wedge timeout: %s", body)
		time.Sleep(5 * time.Second)
		status, body = h.Live()
		require.Equal(t, http.StatusServiceUnavailable, status, body)
		require.Equal(t, "wedged: the engine's stats have not answered for 11.5s\n", body)
		require.Equal(t, int64(2), calls.Load(), "the probes wait for the call in progress, they start no other")

		block.Store(false)
		close(release)
		synctest.Wait()
		status, body = h.Live()
		require.Equal(t, http.StatusOK, status, body)

		running.Store(false)
		status, body = h.Live()
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, "exited: the engine has stopped\n", body)
	})
}
