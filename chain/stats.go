package chain

import (
	"fmt"
	"time"

	metrics "github.com/rcrowley/go-metrics"
)

// PartitionStats is a snapshot of one running partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	// HighWatermark as last seen by the source (-1 unknown).
	HighWatermark int64
	// Committed is the last offset Kafka acknowledged (-1 none).
	Committed    int64
	Commits      int64
	CommitErrors int64
	BufferLen    int
	BufferCap    int
	BufferLow    int64
	BufferHigh   int64
	// Restore is how the partition's state was restored at assignment
	// (chains with a changelog).
	Restore RestoreStats
	Stages  []StageStats
}

// StageStats is a snapshot of one stage of one partition.
type StageStats struct {
	Name string
	// Position is next(S,p): every offset below it is complete.
	Position int64
	// Watermark is wm(S,p), zero if none.
	Watermark time.Time
	// Lag is HighWatermark − Position (-1 when the high watermark is unknown).
	Lag int64
	// GapOffsets and GapTime are the distance to the leader's checkpoint
	// (zero for the first stage).
	GapOffsets int64
	GapTime    time.Duration
	// Mode is "buffered" or "polling"; Switches counts mode changes.
	Mode     string
	Switches int64
	// InFlight counts records begun and not completed.
	InFlight     int
	Processed    int64
	Skipped      int64
	DeadLettered int64
	Retries      int64
	// IdleReleases counts records the gate let through because the leader was idle.
	IdleReleases int64
	// LastProgress is when Position was last seen to move (checked at every
	// commit interval); with Lag > 0 a stale value means a stall.
	LastProgress time.Time
}

func (p *partitionRun) stats() PartitionStats {
	ps := PartitionStats{
		Topic: p.topic, Partition: p.partition,
		HighWatermark: p.src.HighWatermark(),
		Committed:     p.committed.Load(),
		Commits:       p.commits.Load(),
		CommitErrors:  p.commitErr.Load(),
		Restore:       p.restore.stats(p.c.cfg.clock.Now()),
	}
	if !p.ready.Load() {
		return ps
	}
	ps.BufferLen, ps.BufferCap = p.ring.Len(), p.ring.Cap()
	ps.BufferLow, ps.BufferHigh = p.ring.Low(), p.ring.High()
	for _, s := range p.stages {
		ps.Stages = append(ps.Stages, s.stats(ps.HighWatermark))
	}
	return ps
}

func (s *stageRun) stats(hwm int64) StageStats {
	next, wm := s.next.Load(), s.wm.Load()
	st := StageStats{
		Name: s.name, Position: next, Watermark: unixTime(wm), Lag: -1,
		Mode: "buffered", Switches: s.switches.Load(),
		Processed: s.processed.Load(), Skipped: s.skipped.Load(),
		DeadLettered: s.dlq.Load(), Retries: s.retries.Load(), IdleReleases: s.idles.Load(),
		LastProgress: unixTime(s.lastProgress.Load()),
	}
	if hwm >= 0 {
		st.Lag = max(hwm-next, 0)
	}
	if s.mode.Load() == modePolling {
		st.Mode = "polling"
	}
	if l := s.leader; l != nil {
		st.GapOffsets = l.next.Load() - next
		if lwm := l.wm.Load(); lwm != 0 && wm != 0 {
			st.GapTime = time.Duration(lwm - wm)
		}
	}
	s.mu.Lock()
	st.InFlight = s.tracker.InFlight()
	s.mu.Unlock()
	return st
}

// registerMetrics registers the partition's gauges in the configured registry
// and returns the function that unregisters them (called when the partition
// stops, so a revoked partition leaves no series behind).
func (p *partitionRun) registerMetrics() func() {
	r := p.c.cfg.registry
	if r == nil {
		return func() {}
	}
	var names []string
	reg := func(name string, f func() int64) {
		names = append(names, name)
		_ = r.Register(name, metrics.NewFunctionalGauge(f))
	}
	base := fmt.Sprintf("differential.partition.%s.%d.", p.topic, p.partition)
	reg(base+"committed", p.committed.Load)
	reg(base+"commits", p.commits.Load)
	reg(base+"commit_errors", p.commitErr.Load)
	reg(base+"high_watermark", p.src.HighWatermark)
	reg(base+"buffer_fill", func() int64 { return int64(p.ring.Len()) })
	for _, s := range p.stages {
		sb := fmt.Sprintf("differential.stage.%s.%d.%s.", p.topic, p.partition, s.name)
		reg(sb+"position", s.next.Load)
		reg(sb+"watermark_unix_ms", func() int64 { return s.wm.Load() / int64(time.Millisecond) })
		reg(sb+"lag", func() int64 {
			if h := p.src.HighWatermark(); h >= 0 {
				return max(h-s.next.Load(), 0)
			}
			return -1
		})
		reg(sb+"mode_polling", func() int64 { return int64(s.mode.Load()) })
		reg(sb+"mode_switches", s.switches.Load)
		reg(sb+"processed", s.processed.Load)
		reg(sb+"skipped", s.skipped.Load)
		reg(sb+"dead_lettered", s.dlq.Load)
		reg(sb+"retries", s.retries.Load)
		reg(sb+"idle_releases", s.idles.Load)
		reg(sb+"in_flight", s.outstanding.Load)
		if l := s.leader; l != nil {
			reg(sb+"gap_offsets", func() int64 { return l.next.Load() - s.next.Load() })
			reg(sb+"gap_ms", func() int64 {
				lw, w := l.wm.Load(), s.wm.Load()
				if lw == 0 || w == 0 {
					return 0
				}
				return (lw - w) / int64(time.Millisecond)
			})
		}
		reg(sb+"last_progress_unix_ms", func() int64 { return s.lastProgress.Load() / int64(time.Millisecond) })
	}
	return func() {
		for _, n := range names {
			r.Unregister(n)
		}
	}
}

// registerRestoreMetrics registers the partition's restore gauges (chains
// with a changelog) for as long as the partition runs.
func (p *partitionRun) registerRestoreMetrics() func() {
	r := p.c.cfg.registry
	if r == nil {
		return func() {}
	}
	base := fmt.Sprintf("differential.partition.%s.%d.", p.topic, p.partition)
	rs := &p.restore
	gauges := map[string]metrics.Gauge{
		base + "restore_records": metrics.NewFunctionalGauge(rs.records.Load),
		base + "restore_bytes":   metrics.NewFunctionalGauge(rs.bytes.Load),
		base + "restoring": metrics.NewFunctionalGauge(func() int64 {
			if ph := rs.phase.Load(); ph != phaseNone && ph != phaseDone {
				return 1
			}
			return 0
		}),
	}
	for n, g := range gauges {
		_ = r.Register(n, g)
	}
	dur := base + "restore_duration_seconds"
	_ = r.Register(dur, metrics.NewFunctionalGaugeFloat64(func() float64 {
		return rs.stats(p.c.cfg.clock.Now()).Duration.Seconds()
	}))
	return func() {
		for n := range gauges {
			r.Unregister(n)
		}
		r.Unregister(dur)
	}
}
