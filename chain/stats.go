package chain

import "time"

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
	// FirstStagePauses counts the first stage's pauses for a follower
	// about to be evicted from the buffer, PauseGiveUps those that hit the
	// bound (DESIGN.md "Stage 0 pauses, briefly").
	FirstStagePauses, PauseGiveUps int64
	// LeaderContact is when the partition's leader last answered the
	// source (a Source implementing LeaderContact; zero otherwise).
	LeaderContact time.Time
	// CommitPendingSince is when the oldest commit not yet acknowledged
	// was first attempted (a Committer implementing CommitPending); zero
	// when none is pending or the committer does not say.
	CommitPendingSince time.Time
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
	// Lag is HighWatermark − Position (-1 when the high watermark is
	// unknown), where a stage that completed everything fetched counts as
	// at the end of what the source confirmed holds nothing more to
	// deliver (EndConfirmer: a transactional tail of markers or aborted
	// records is no lag; a fetcher stalled behind records in the log is).
	Lag int64
	// GapOffsets and GapTime are the distance to the leader's checkpoint
	// (zero for the first stage).
	GapOffsets int64
	GapTime    time.Duration
	// Mode is "buffered" or "polling"; Switches counts mode changes.
	Mode     string
	Switches int64
	// InFlight counts records begun and not completed.
	InFlight int
	// KeyGated counts the records of a key-scoped stage (GateKey) begun and
	// waiting in the key gate for their leader's progress on their key
	// (part of InFlight).
	KeyGated     int
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
		Restore:       p.restored.stats(time.Now()),

		FirstStagePauses: p.pauses.Load(),
		PauseGiveUps:     p.pauseGiveUps.Load(),
	}
	if lc, ok := p.src.(LeaderContact); ok {
		ps.LeaderContact = lc.LeaderContact()
	}
	if cp, ok := p.committer.(CommitPending); ok {
		ps.CommitPendingSince = cp.CommitPendingSince()
	}
	v := p.view.Load()
	if v == nil {
		return ps
	}
	ps.BufferLen, ps.BufferCap = v.ring.Len(), v.ring.Cap()
	ps.BufferLow, ps.BufferHigh = v.ring.Low(), v.ring.High()
	from, end, confirmed := p.confirmedEnd()
	for _, s := range v.stages {
		st := s.stats(ps.HighWatermark)
		if ps.HighWatermark >= 0 {
			st.Lag = stageLag(ps.HighWatermark, st.Position, from, end, confirmed)
		}
		ps.Stages = append(ps.Stages, st)
	}
	return ps
}

func (s *stageRun) stats(hwm int64) StageStats {
	next, wm := s.cp.load()
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
		lnext, lwm := l.cp.load()
		st.GapOffsets = lnext - next
		if lwm != 0 && wm != 0 {
			st.GapTime = time.Duration(lwm - wm)
		}
	}
	s.mu.Lock()
	st.InFlight = s.mu.tracker.InFlight()
	s.mu.Unlock()
	if s.kg != nil {
		st.KeyGated = int(s.kg.size.Load())
	}
	return st
}
