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

// A partition whose leader has not answered for longer than the stall
// timeout is stalled although no stage shows lag (nothing was fetched, so
// the last high watermark equals the position); one whose leader answers
// is merely idle. The same for a commit the coordinator has not
// acknowledged. Both recover as soon as the contact or the commit does.
func TestHealthLeaderAndCommitStalls(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	idle := func(p int32) chain.PartitionStats {
		return chain.PartitionStats{Topic: "events", Partition: p, HighWatermark: 100,
			LeaderContact: now.Add(-time.Second),
			Stages:        []chain.StageStats{{Name: "click", Position: 100, Lag: 0, LastProgress: now.Add(-time.Hour)}}}
	}
	stats := []chain.PartitionStats{idle(0), idle(1)}
	h := &Health{Stats: func() []chain.PartitionStats { return stats }, StallTimeout: 5 * time.Second,
		Now: func() time.Time { return now }}

	status, body := h.Check()
	require.Equal(t, http.StatusOK, status, "idle partitions whose leaders answer are healthy: %s", body)

	stats[1].LeaderContact = now.Add(-5 * time.Second) // at the threshold: not yet
	status, body = h.Check()
	require.Equal(t, http.StatusOK, status, body)

	stats[1].LeaderContact = now.Add(-7 * time.Second)
	status, body = h.Check()
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "events/1: no answer from the partition's leader for 7s")
	require.NotContains(t, body, "events/0")

	stats[1].LeaderContact = now // the leader answers again
	status, body = h.Check()
	require.Equal(t, http.StatusOK, status, body)

	stats[0].CommitPendingSince = now.Add(-3 * time.Second) // a slow commit is no stall
	status, body = h.Check()
	require.Equal(t, http.StatusOK, status, body)

	stats[0].CommitPendingSince = now.Add(-6 * time.Second)
	status, body = h.Check()
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "events/0: commit not acknowledged by the group coordinator for 6s")

	stats[0].CommitPendingSince = time.Time{} // acknowledged
	status, body = h.Check()
	require.Equal(t, http.StatusOK, status, body)

	// A source or committer that does not say (zero times) is never stalled
	// by these rules.
	stats = []chain.PartitionStats{{Topic: "events", Partition: 2}}
	status, body = h.Check()
	require.Equal(t, http.StatusOK, status, body)
}
