package liveview

import (
	"strings"
	"time"
)

// APIPath is where the snapshot is served (GET, application/json).
const APIPath = "/api/v1/chain"

// Snapshot is the JSON document at APIPath. Times are RFC 3339, durations
// seconds; a zero time is left out.
type Snapshot struct {
	Time time.Time `json:"time"`
	// Info describes the instance (group, topic, guarantee, ...), in the
	// order the server gave.
	Info []Field `json:"info,omitempty"`
	// Stages are the chain's stage names, first (the leader of the
	// second) to last.
	Stages []string `json:"stages"`
	Health Health   `json:"health"`
	// ExactlyOnce is the exactly-once cycles' state; absent in
	// at-least-once mode.
	ExactlyOnce *Transactions `json:"exactly_once,omitempty"`
	// Partitions are the partitions this instance runs, by topic and
	// partition.
	Partitions []Partition `json:"partitions"`
}

// Field is one name and value of Snapshot.Info.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Health is the health check's verdict, as /healthz gives it.
type Health struct {
	// Status is /healthz's HTTP status (200 or 503); State the first words
	// of its answer: "ok", "stalled" or "not ready".
	Status int    `json:"status"`
	State  string `json:"state"`
	Text   string `json:"text"`
}

// Partition is one running partition.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// HighWatermark as last seen (-1: unknown); Committed the last offset
	// Kafka acknowledged (-1: none).
	HighWatermark int64 `json:"high_watermark"`
	Committed     int64 `json:"committed"`
	Commits       int64 `json:"commits"`
	CommitErrors  int64 `json:"commit_errors"`
	// CommitPendingSeconds is how long the oldest unacknowledged commit
	// has waited (0: none).
	CommitPendingSeconds float64 `json:"commit_pending_seconds,omitzero"`
	// LeaderContactSeconds is how long ago the partition's leader last
	// answered (absent when the source does not say).
	LeaderContactSeconds *float64 `json:"leader_contact_seconds,omitempty"`
	Buffer               Buffer   `json:"buffer"`
	// FirstStagePauses and PauseGiveUps: the first stage's pauses for a
	// follower about to be evicted from the buffer, and those that hit
	// their bound.
	FirstStagePauses int64   `json:"first_stage_pauses"`
	PauseGiveUps     int64   `json:"pause_give_ups"`
	Restore          Restore `json:"restore"`
	// Stages is empty while the partition's state is being restored.
	Stages []Stage `json:"stages"`
}

// Buffer is the partition's handoff buffer.
type Buffer struct {
	Len  int   `json:"len"`
	Cap  int   `json:"cap"`
	Low  int64 `json:"low"`
	High int64 `json:"high"`
}

// Restore is how the partition's state was (or is being) restored from the
// changelog; all zero for a chain without one.
type Restore struct {
	Restoring bool   `json:"restoring"`
	Phase     string `json:"phase,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// From and To bound the changelog offsets read, Position is the next.
	From     int64 `json:"from"`
	To       int64 `json:"to"`
	Position int64 `json:"position"`
	// Progress is the share of [From, To) read, in [0, 1] (1 for an empty
	// range).
	Progress        float64   `json:"progress"`
	Records         int64     `json:"records"`
	Bytes           int64     `json:"bytes"`
	Appended        int64     `json:"appended"`
	Started         time.Time `json:"started,omitzero"`
	DurationSeconds float64   `json:"duration_seconds"`
}

// Stage is one stage of one partition.
type Stage struct {
	Name string `json:"name"`
	// Position is next(S,p): every offset below it is complete. Lag is the
	// high watermark minus it (-1: unknown).
	Position  int64     `json:"position"`
	Lag       int64     `json:"lag"`
	Watermark time.Time `json:"watermark,omitzero"`
	// Leader is the stage this one follows ("" for the first stage);
	// GapOffsets and GapSeconds are the distance to it.
	Leader     string  `json:"leader,omitempty"`
	GapOffsets int64   `json:"gap_offsets"`
	GapSeconds float64 `json:"gap_seconds"`
	// Mode is "buffered" or "polling"; Switches counts the changes.
	Mode     string `json:"mode"`
	Switches int64  `json:"switches"`
	// Rate is how fast the position moved over the last seconds, offsets
	// per second; null until the View has a sample half a second old.
	Rate     *float64 `json:"rate"`
	InFlight int      `json:"in_flight"`
	// KeyGated counts records begun and waiting in the key gate for the
	// leader's progress on their key (part of InFlight).
	KeyGated int `json:"key_gated"`
	// GateWaits: a follower with records left whose leader holds it back
	// (its records wait in the key gate, or it is within the offset
	// distance of its leader).
	GateWaits    bool      `json:"gate_waits"`
	Processed    int64     `json:"processed"`
	Skipped      int64     `json:"skipped"`
	DeadLettered int64     `json:"dead_lettered"`
	Retries      int64     `json:"retries"`
	IdleReleases int64     `json:"idle_releases"`
	LastProgress time.Time `json:"last_progress,omitzero"`
}

// Transactions is the exactly-once cycles' state.
type Transactions struct {
	Committed int64 `json:"committed"`
	// Aborted counts the aborted transactions by cause
	// (chain.TxnAbortCauses; every cause is present).
	Aborted map[string]int64 `json:"aborted"`
	// Last is the last cycle that held a transaction (absent before one
	// ended).
	Last *TxnCycle `json:"last,omitempty"`
}

// TxnCycle is one ended exactly-once cycle.
type TxnCycle struct {
	Ended     time.Time `json:"ended"`
	Committed bool      `json:"committed"`
	// Cause and Error say why it was aborted.
	Cause            string  `json:"cause,omitempty"`
	Error            string  `json:"error,omitempty"`
	DurationSeconds  float64 `json:"duration_seconds"`
	Outputs          int64   `json:"outputs"`
	ChangelogRecords int64   `json:"changelog_records"`
	Partitions       int     `json:"partitions"`
}

// healthState is the verdict's first words: the text before the first
// colon of the health check's answer.
func healthState(text string) string {
	s, _, _ := strings.Cut(strings.TrimSpace(text), ":")
	return s
}
