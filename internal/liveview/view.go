package liveview

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Config is what a View reads.
type Config struct {
	// Stats returns the chain's snapshot (chain.(*Chain).Stats); required.
	Stats func() []chain.PartitionStats
	// Stages are the chain's stage names (chain.(*Chain).StageNames).
	Stages []string
	// Health returns the health check's status and answer
	// (metricshttp.(*Health).Check); nil: not shown.
	Health func() (status int, body string)
	// Txn tracks the exactly-once cycles; nil in at-least-once mode.
	Txn *TxnTracker
	// OffsetDistance is the chain's safety distance, for GateWaits.
	OffsetDistance int64
	// Info describes the instance in the page's header.
	Info []Field
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Rate sampling: a sample of every stage's position is kept at most once
// every sampleEvery, for rateWindow; a rate spans from the oldest sample
// kept to now, and is not given over less than minRateSpan (two requests a
// few milliseconds apart say nothing about a rate).
const (
	sampleEvery = time.Second
	rateWindow  = 5 * time.Second
	minRateSpan = 500 * time.Millisecond
)

// View builds Snapshots and serves them with the page.
type View struct {
	cfg Config
	mu  struct {
		sync.Mutex
		samples []sample // oldest first
	}
}

type stageKey struct {
	topic     string
	partition int32
	stage     string
}

type sample struct {
	at  time.Time
	pos map[stageKey]int64
}

// New returns the View of cfg.
func New(cfg Config) *View {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &View{cfg: cfg}
}

// Snapshot builds the current snapshot.
func (v *View) Snapshot() Snapshot {
	now := v.cfg.Now()
	stats := v.cfg.Stats()
	slices.SortFunc(stats, func(a, b chain.PartitionStats) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	s := Snapshot{Time: now, Info: v.cfg.Info, Stages: v.cfg.Stages, Partitions: make([]Partition, 0, len(stats))}
	if s.Stages == nil {
		s.Stages = []string{}
	}
	if v.cfg.Health != nil {
		status, body := v.cfg.Health()
		s.Health = Health{Status: status, State: healthState(body), Text: body}
	}
	if v.cfg.Txn != nil {
		s.ExactlyOnce = v.cfg.Txn.snapshot()
	}
	pos := map[stageKey]int64{}
	for _, ps := range stats {
		for _, st := range ps.Stages {
			pos[stageKey{ps.Topic, ps.Partition, st.Name}] = st.Position
		}
	}
	rates := v.rates(now, pos)
	for _, ps := range stats {
		s.Partitions = append(s.Partitions, v.partition(now, ps, rates))
	}
	return s
}

func (v *View) partition(now time.Time, ps chain.PartitionStats, rates map[stageKey]float64) Partition {
	p := Partition{
		Topic: ps.Topic, Partition: ps.Partition,
		HighWatermark: ps.HighWatermark, Committed: ps.Committed, Commits: ps.Commits, CommitErrors: ps.CommitErrors,
		Buffer:           Buffer{Len: ps.BufferLen, Cap: ps.BufferCap, Low: ps.BufferLow, High: ps.BufferHigh},
		FirstStagePauses: ps.FirstStagePauses, PauseGiveUps: ps.PauseGiveUps,
		Restore: restore(ps.Restore),
		Stages:  make([]Stage, 0, len(ps.Stages)),
	}
	if !ps.CommitPendingSince.IsZero() {
		p.CommitPendingSeconds = now.Sub(ps.CommitPendingSince).Seconds()
	}
	if !ps.LeaderContact.IsZero() {
		d := max(now.Sub(ps.LeaderContact).Seconds(), 0)
		p.LeaderContactSeconds = &d
	}
	for i, st := range ps.Stages {
		s := Stage{
			Name: st.Name, Position: st.Position, Lag: st.Lag, Watermark: st.Watermark,
			GapOffsets: st.GapOffsets, GapSeconds: st.GapTime.Seconds(),
			Mode: st.Mode, Switches: st.Switches, InFlight: st.InFlight, KeyGated: st.KeyGated,
			Processed: st.Processed, Skipped: st.Skipped, DeadLettered: st.DeadLettered,
			Retries: st.Retries, IdleReleases: st.IdleReleases, LastProgress: st.LastProgress,
		}
		if i > 0 {
			s.Leader = ps.Stages[i-1].Name
			s.GateWaits = st.Lag > 0 && (st.KeyGated > 0 || st.GapOffsets <= v.cfg.OffsetDistance)
		}
		if r, ok := rates[stageKey{ps.Topic, ps.Partition, st.Name}]; ok {
			s.Rate = &r
		}
		p.Stages = append(p.Stages, s)
	}
	return p
}

func restore(r chain.RestoreStats) Restore {
	out := Restore{
		Restoring: r.Restoring, Phase: r.Phase, Reason: r.Reason,
		From: r.From, To: r.To, Position: r.Position, Progress: 1,
		Records: r.Records, Bytes: r.Bytes, Appended: r.Appended,
		Started: r.Started, DurationSeconds: r.Duration.Seconds(),
	}
	if r.To > r.From {
		out.Progress = min(max(float64(r.Position-r.From)/float64(r.To-r.From), 0), 1)
	}
	return out
}

// rates returns each stage's rate from the oldest sample kept to now, and
// keeps pos as a sample when the newest is sampleEvery old. A stage the
// oldest sample does not have (a partition assigned since), or whose
// position went back (a partition that moved and came back), has no rate.
func (v *View) rates(now time.Time, pos map[stageKey]int64) map[stageKey]float64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	keep := v.mu.samples[:0]
	for _, s := range v.mu.samples {
		if now.Sub(s.at) <= rateWindow {
			keep = append(keep, s)
		}
	}
	v.mu.samples = keep
	out := map[stageKey]float64{}
	if len(keep) > 0 {
		base := keep[0]
		if span := now.Sub(base.at); span >= minRateSpan {
			for k, p := range pos {
				if b, ok := base.pos[k]; ok && p >= b {
					out[k] = float64(p-b) / span.Seconds()
				}
			}
		}
	}
	if len(keep) == 0 || now.Sub(keep[len(keep)-1].at) >= sampleEvery {
		v.mu.samples = append(v.mu.samples, sample{at: now, pos: pos})
	}
	return out
}

// APIHandler serves the Snapshot as JSON.
func (v *View) APIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(v.Snapshot())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	})
}

//go:embed page.html
var page []byte

// PageHandler serves the page. Its script fetches the snapshot from
// APIPath relative to the page's own address (so a proxy may serve the
// view under a path prefix).
func (v *View) PageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything the page needs is inline; nothing else may load.
		h.Set("Content-Security-Policy", "default-src 'none'; connect-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(page)
	})
}
