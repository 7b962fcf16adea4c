package liveview_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/liveview"
)

// fakeChain is a chain's Stats under the test's control.
type fakeChain struct {
	mu    sync.Mutex
	stats []chain.PartitionStats
}

func (f *fakeChain) Stats() []chain.PartitionStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]chain.PartitionStats, len(f.stats))
	for i, p := range f.stats {
		out[i] = p
		out[i].Stages = append([]chain.StageStats(nil), p.Stages...)
	}
	return out
}

// set sets every stage of partition p to position pos.
func (f *fakeChain) set(p int32, pos ...int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.stats {
		if f.stats[i].Partition == p {
			for j := range f.stats[i].Stages {
				f.stats[i].Stages[j].Position = pos[j]
			}
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func twoPartitions() *fakeChain {
	stage := func(name string, pos, lag, gap int64, keyGated int) chain.StageStats {
		return chain.StageStats{Name: name, Position: pos, Lag: lag, GapOffsets: gap, KeyGated: keyGated, InFlight: keyGated,
			Mode: "buffered", LastProgress: t0.Add(-time.Second)}
	}
	return &fakeChain{stats: []chain.PartitionStats{
		{Topic: "events", Partition: 1, HighWatermark: 100, Committed: 40, Commits: 3, BufferLen: 10, BufferCap: 8192,
			LeaderContact: t0.Add(-300 * time.Millisecond),
			Restore:       chain.RestoreStats{Phase: "done", From: 0, To: 50, Position: 50, Records: 50, Bytes: 4096, Duration: 2 * time.Second},
			Stages:        []chain.StageStats{stage("click", 100, 0, 0, 0), stage("install", 60, 40, 40, 3), stage("purchase", 60, 40, 0, 0)}},
		{Topic: "events", Partition: 0, HighWatermark: 10, Committed: -1,
			Restore: chain.RestoreStats{Restoring: true, Phase: "reading", From: 100, To: 300, Position: 150, Started: t0.Add(-time.Minute)}},
	}}
}

// TestSnapshot: every partition (sorted) and stage is there with what its
// Stats say, the leader of each follower, the gate's verdict, the
// restore's progress, the health check's and the transactions'.
func TestSnapshot(t *testing.T) {
	c := &clock{t0}
	fc := twoPartitions()
	txn := liveview.NewTxnTracker(c.now)
	v := liveview.New(liveview.Config{
		Stats: fc.Stats, Stages: []string{"click", "install", "purchase"}, Txn: txn, Now: c.now,
		Health: func() (int, string) {
			return http.StatusServiceUnavailable, "stalled: 1 stage(s)\nevents/1 stage install: ...\n"
		},
		Info: []liveview.Field{{Name: "group", Value: "g"}},
	})
	txn.TxnEnded(chain.TxnInfo{Committed: true, Duration: 120 * time.Millisecond, Outputs: 7, ChangelogRecords: 3, Offsets: 2})
	txn.TxnEnded(chain.TxnInfo{Cause: chain.TxnAbortSend, Err: errors.New("fenced"), Duration: time.Second})

	s := v.Snapshot()
	require.Equal(t, t0, s.Time)
	require.Equal(t, []string{"click", "install", "purchase"}, s.Stages)
	require.Equal(t, liveview.Health{Status: 503, State: "stalled", Text: "stalled: 1 stage(s)\nevents/1 stage install: ...\n"}, s.Health)
	require.Len(t, s.Partitions, 2)

	p0, p1 := s.Partitions[0], s.Partitions[1]
	require.Equal(t, int32(0), p0.Partition)
	require.Empty(t, p0.Stages, "a restoring partition has no stages yet")
	require.True(t, p0.Restore.Restoring)
	require.InDelta(t, 0.25, p0.Restore.Progress, 1e-9)
	require.Nil(t, p0.LeaderContactSeconds)

	require.Equal(t, int32(1), p1.Partition)
	require.Equal(t, int64(100), p1.HighWatermark)
	require.Equal(t, liveview.Buffer{Len: 10, Cap: 8192}, p1.Buffer)
	require.NotNil(t, p1.LeaderContactSeconds)
	require.InDelta(t, 0.3, *p1.LeaderContactSeconds, 1e-9)
	require.Equal(t, 1.0, p1.Restore.Progress)
	require.Len(t, p1.Stages, 3)
	click, install, purchase := p1.Stages[0], p1.Stages[1], p1.Stages[2]
	require.Equal(t, "", click.Leader)
	require.False(t, click.GateWaits)
	require.Equal(t, "click", install.Leader)
	require.True(t, install.GateWaits, "records wait in its key gate")
	require.Equal(t, "install", purchase.Leader)
	require.True(t, purchase.GateWaits, "lag and at its leader's position")
	require.Nil(t, click.Rate, "no rate before a sample a second old")

	x := s.ExactlyOnce
	require.NotNil(t, x)
	require.Equal(t, int64(1), x.Committed)
	require.Len(t, x.Aborted, len(chain.TxnAbortCauses))
	require.Equal(t, int64(1), x.Aborted["send"])
	require.Equal(t, &liveview.TxnCycle{Ended: t0, Cause: "send", Error: "fenced", DurationSeconds: 1}, x.Last)

	// At-least-once: no exactly_once in the JSON.
	b, err := json.Marshal(liveview.New(liveview.Config{Stats: fc.Stats, Now: c.now}).Snapshot())
	require.NoError(t, err)
	require.NotContains(t, string(b), "exactly_once")
	require.Contains(t, string(b), `"stages":[]`)
}

// TestRates: a stage's rate spans from the oldest sample of the last five
// seconds to now, if that is half a second or more; samples are taken at
// most once a second; a position that
// went back, or a partition the oldest sample does not have, has no rate.
func TestRates(t *testing.T) {
	c := &clock{t0}
	fc := twoPartitions()
	v := liveview.New(liveview.Config{Stats: fc.Stats, Now: c.now})
	rate := func(s liveview.Snapshot, stage int) *float64 {
		for _, p := range s.Partitions {
			if p.Partition == 1 {
				return p.Stages[stage].Rate
			}
		}
		t.Fatal("no partition 1")
		return nil
	}
	require.Nil(t, rate(v.Snapshot(), 0)) // sample at t0: 100, 60, 60

	c.advance(100 * time.Millisecond)
	fc.set(1, 110, 60, 60)
	require.Nil(t, rate(v.Snapshot(), 0), "not over less than half a second")

	c.advance(400 * time.Millisecond)
	fc.set(1, 150, 60, 60)
	require.InDelta(t, 100, *rate(v.Snapshot(), 0), 1e-9, "50 offsets in 0.5 s") // no sample: the last is < 1 s old
	require.InDelta(t, 0, *rate(v.Snapshot(), 1), 1e-9)

	c.advance(500 * time.Millisecond)
	fc.set(1, 200, 80, 60)
	s := v.Snapshot() // sample at t0+1s
	require.InDelta(t, 100, *rate(s, 0), 1e-9)
	require.InDelta(t, 20, *rate(s, 1), 1e-9)

	c.advance(4500 * time.Millisecond) // t0+5.5s: the t0 sample is out of the window
	fc.set(1, 200, 80, 60)
	require.InDelta(t, 0, *rate(v.Snapshot(), 0), 1e-9, "from the t0+1s sample, nothing moved")

	c.advance(time.Second)
	fc.set(1, 10, 10, 10) // the partition moved away and back
	require.Nil(t, rate(v.Snapshot(), 0))
}

// TestHandlers: the JSON endpoint serves the snapshot as application/json,
// not cached; the page is HTML whose script polls it, and loads nothing
// from anywhere else.
func TestHandlers(t *testing.T) {
	fc := twoPartitions()
	v := liveview.New(liveview.Config{Stats: fc.Stats, Stages: []string{"click", "install", "purchase"}})

	w := httptest.NewRecorder()
	v.APIHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, liveview.APIPath, nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var s liveview.Snapshot
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &s))
	require.Len(t, s.Partitions, 2)
	require.Len(t, s.Partitions[1].Stages, 3)

	w = httptest.NewRecorder()
	v.PageHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"))
	require.Contains(t, w.Header().Get("Content-Security-Policy"), "default-src 'none'")
	body := w.Body.String()
	require.Contains(t, body, `const API = "`+strings.TrimPrefix(liveview.APIPath, "/")+`"`)
	require.NotRegexp(t, regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`), body, "no external asset")
	require.NotContains(t, body, "@import")
}
